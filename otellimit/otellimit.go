// Package otellimit records redlimit's decisions as OpenTelemetry metrics,
// through the go.opentelemetry.io/otel/metric API; any SDK and exporter
// takes them from there. It is a module of its own, so that users of
// redlimit who do not use OpenTelemetry never download it.
//
//	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))      // export: OTLP, Prometheus, ...
//	metrics, err := otellimit.New(mp)                                   // construct (nil: the global provider)
//	h := nethttp.New(lim, core.PerMinute(100), metrics.Observer())(api) // plug into the middleware
//
// The instruments, of the meter "github.com/redlimit/redlimit/otellimit"
// (the *Name constants; docs/metrics.md lists the same, and a test holds
// the three together):
//
//	redlimit.decisions            counter, {decision}     redlimit.policy, redlimit.outcome
//	redlimit.decision.duration    histogram, s            redlimit.policy (DefaultBuckets)
//	redlimit.breaker.open         gauge, 1 while open     redlimit.limiter (WatchLimiter)
//	redlimit.breaker.opens        counter, {opening}      redlimit.limiter (WatchLimiter)
//	redlimit.settlements.failed   counter, {settlement}   redlimit.limiter (WatchLimiter)
//	redlimit.releases.retried     counter, {release}      redlimit.limiter (WatchLimiter)
//	redlimit.releases.abandoned   counter, {release}      redlimit.limiter (WatchLimiter)
//	redlimit.state.losses         counter, {loss}         redlimit.limiter (WatchLimiter)
//
// Through a Prometheus exporter they read as promlimit's metrics do
// (redlimit_decisions_total, ...).
//
// redlimit.outcome is one of the redlimit.Outcome values: allowed, denied,
// denied_cached, dry_run_denied, local, error, invalid, skipped.
// redlimit.policy is the policy's name (redlimit.WithName, its limits by
// default, or a rules table's pattern): a set fixed when the middleware is
// built, never taken from a request's path or key, so the number of
// attribute sets is bounded by the policies you configure times eight
// outcomes.
package otellimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// ScopeName is the name of the meter the instruments belong to.
const ScopeName = "github.com/redlimit/redlimit/otellimit"

// The instrument names.
const (
	// DecisionsName counts decisions, by policy and outcome.
	DecisionsName = "redlimit.decisions"
	// DurationName is the histogram of how long decisions took, Redis
	// included, in seconds, by policy. Skipped requests are not in it.
	DurationName = "redlimit.decision.duration"
	// BreakerName is 1 while a Limiter's breaker is open (Redis kept
	// failing; decisions fail at once), else 0, by limiter.
	BreakerName = "redlimit.breaker.open"
	// BreakerOpensName counts the times a Limiter's breaker opened since
	// the Limiter was created, by limiter: an opening shows even if the
	// breaker closed again before the collection.
	BreakerOpensName = "redlimit.breaker.opens"
	// SettlementsFailedName counts a Limiter's reservation settlements
	// (Settle, Release, the middleware's) that failed since the Limiter
	// was created, by limiter (core.Stats.FailedSettlements).
	SettlementsFailedName = "redlimit.settlements.failed"
	// ReleasesRetriedName counts the failed settlements whose Concurrency
	// slots the Limiter then freed in the background, by limiter
	// (core.Stats.RetriedReleases).
	ReleasesRetriedName = "redlimit.releases.retried"
	// ReleasesAbandonedName counts the failed settlements whose slots the
	// Limiter stopped trying to free (their lease ended first, which frees
	// them), by limiter (core.Stats.AbandonedReleases).
	ReleasesAbandonedName = "redlimit.releases.abandoned"
	// StateLossesName counts the times a Limiter saw a Redis server lose
	// the state of its limits (a restart without persistence, FLUSHALL, a
	// failover to an empty replica) since the Limiter was created, by
	// limiter (core.Stats.StateLosses; core.WithLossCheck). Alert on any
	// increase: the counts on that server start again.
	StateLossesName = "redlimit.state.losses"
)

// The attribute keys.
const (
	// PolicyKey is the policy's name (redlimit.Decision.Policy).
	PolicyKey = attribute.Key("redlimit.policy")
	// OutcomeKey is what became of the request (redlimit.Decision.Outcome).
	OutcomeKey = attribute.Key("redlimit.outcome")
	// LimiterKey is the name given to WatchLimiter.
	LimiterKey = attribute.Key("redlimit.limiter")
)

// DefaultBuckets returns the duration histogram's default bucket
// boundaries, in seconds: from 100 µs (a decision on a local Redis, or
// answered by the deny cache or an open breaker) through 1 ms (a round trip
// within a data centre), 100 ms (the default timeout, core.DefaultTimeout)
// up to 1 s (a long timeout, or a shaping limit's wait). They are
// promlimit's.
func DefaultBuckets() []float64 {
	return []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
}

// Option configures Metrics.
type Option func(*config)

type config struct {
	buckets []float64
}

// WithBuckets sets the duration histogram's bucket boundaries, in seconds,
// increasing. The default is DefaultBuckets(). A View of the SDK can
// override them.
func WithBuckets(bounds ...float64) Option {
	return func(c *config) { c.buckets = slices.Clone(bounds) }
}

// Metrics counts and times redlimit's decisions. Create it with New, plug
// it into policies with Observer (or call Observe from an observer of your
// own), and watch Limiters' breakers with WatchLimiter. It is safe for
// concurrent use.
type Metrics struct {
	decisions    metric.Int64Counter
	duration     metric.Float64Histogram
	breakerOpen  metric.Int64ObservableGauge
	breakerOpens metric.Int64ObservableCounter
	failed       metric.Int64ObservableCounter // SettlementsFailedName
	retried      metric.Int64ObservableCounter // ReleasesRetriedName
	abandoned    metric.Int64ObservableCounter // ReleasesAbandonedName
	losses       metric.Int64ObservableCounter // StateLossesName

	// policies caches each policy's attribute sets, as measurement
	// options, so that a decision builds none: name -> *policyAttrs.
	policies sync.Map

	mu       sync.Mutex
	limiters []watched
}

// policyAttrs are one policy's measurement options.
type policyAttrs struct {
	outcomes map[redlimit.Outcome][]metric.AddOption // every Outcome's
	duration []metric.RecordOption
}

type watched struct {
	name string
	lim  *core.Limiter
	opts []metric.ObserveOption
}

// New creates the instruments with a meter of mp, named ScopeName; a nil mp
// means the global one, otel.GetMeterProvider(). An error is the meter's,
// or invalid buckets.
func New(mp metric.MeterProvider, opts ...Option) (*Metrics, error) {
	c := config{buckets: DefaultBuckets()}
	for _, opt := range opts {
		opt(&c)
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	meter := mp.Meter(ScopeName)
	m := &Metrics{}
	err := m.decisionInstruments(meter, c.buckets)
	if err == nil {
		err = m.limiterInstruments(meter)
	}
	if err == nil {
		_, err = meter.RegisterCallback(m.observeBreakers, m.breakerOpen, m.breakerOpens, m.failed, m.retried, m.abandoned, m.losses)
	}
	if err != nil {
		return nil, fmt.Errorf("otellimit: %w", err)
	}
	return m, nil
}

// check reports whether the buckets are usable: at least one, increasing.
func (c config) check() error {
	if len(c.buckets) == 0 {
		return errors.New("otellimit: WithBuckets without buckets")
	}
	for i := 1; i < len(c.buckets); i++ {
		if c.buckets[i] <= c.buckets[i-1] {
			return fmt.Errorf("otellimit: buckets %v are not increasing", c.buckets)
		}
	}
	return nil
}

// decisionInstruments makes the instruments a decision records: the
// decisions counter and the duration histogram, of buckets.
func (m *Metrics) decisionInstruments(meter metric.Meter, buckets []float64) error {
	var err error
	m.decisions, err = meter.Int64Counter(DecisionsName, metric.WithUnit("{decision}"),
		metric.WithDescription("Rate limit decisions, by policy and outcome (allowed, denied, denied_cached, dry_run_denied, local, error, invalid, skipped)."))
	if err != nil {
		return err
	}
	m.duration, err = meter.Float64Histogram(DurationName, metric.WithUnit("s"),
		metric.WithDescription("How long rate limit decisions took, Redis included, by policy; skipped requests are not recorded."),
		metric.WithExplicitBucketBoundaries(buckets...))
	return err
}

// limiterInstruments makes the instruments observed from the watched
// Limiters (observeBreakers): their breakers, and their settlements and
// releases that failed.
func (m *Metrics) limiterInstruments(meter metric.Meter) error {
	var err error
	// No unit: "1" would make a Prometheus exporter add _ratio to the name.
	m.breakerOpen, err = meter.Int64ObservableGauge(BreakerName,
		metric.WithDescription("1 while the Limiter's circuit breaker is open (Redis kept failing and decisions fail at once), else 0."))
	if err != nil {
		return err
	}
	m.breakerOpens, err = meter.Int64ObservableCounter(BreakerOpensName, metric.WithUnit("{opening}"),
		metric.WithDescription("Times the Limiter's circuit breaker opened since the Limiter was created."))
	if err != nil {
		return err
	}
	m.failed, err = meter.Int64ObservableCounter(SettlementsFailedName, metric.WithUnit("{settlement}"),
		metric.WithDescription("Reservation settlements of the Limiter that failed (a timeout, a lost connection, an open breaker)."))
	if err != nil {
		return err
	}
	m.retried, err = meter.Int64ObservableCounter(ReleasesRetriedName, metric.WithUnit("{release}"),
		metric.WithDescription("Failed settlements whose Concurrency slots the Limiter then freed in the background."))
	if err != nil {
		return err
	}
	m.abandoned, err = meter.Int64ObservableCounter(ReleasesAbandonedName, metric.WithUnit("{release}"),
		metric.WithDescription("Failed settlements whose Concurrency slots the Limiter stopped trying to free (their lease frees them)."))
	if err != nil {
		return err
	}
	m.losses, err = meter.Int64ObservableCounter(StateLossesName, metric.WithUnit("{loss}"),
		metric.WithDescription("Times the Limiter saw a Redis server lose the limits' state (a restart without persistence, FLUSHALL, a failover to an empty replica)."))
	return err
}

// Observer returns the option that plugs m into a policy:
// redlimit.WithObserver(m.Observe). Give it to every middleware (or rules
// table) whose decisions m should count.
//
// Observer composes with other observers: every WithObserver option of a
// policy sees every decision. It records each in the context of its
// request, of any protocol: an HTTP request's, a gRPC call's (give it to
// grpclimit.With).
func (m *Metrics) Observer() redlimit.Option {
	return redlimit.WithRequestFuncs(redlimit.RequestFuncs{Observe: func(q redlimit.Request, d redlimit.Decision) { m.record(q.Context, d) }})
}

// Observe counts d under its policy and outcome and, unless the request
// was skipped, records d.Duration, in the context of r (nil r, a request
// of another protocol: no context). It is for calling from an observer of
// your own; the observer Observer plugs in does the same. The attribute
// sets of a policy are built once, on its first decision.
func (m *Metrics) Observe(r *http.Request, d redlimit.Decision) {
	ctx := context.Background()
	if r != nil {
		ctx = r.Context()
	}
	m.record(ctx, d)
}

// record counts and times d in ctx.
func (m *Metrics) record(ctx context.Context, d redlimit.Decision) {
	if ctx == nil {
		ctx = context.Background()
	}
	pa := m.policy(d.Policy)
	if opts, ok := pa.outcomes[d.Outcome]; ok {
		m.decisions.Add(ctx, 1, opts...)
	} else {
		m.decisions.Add(ctx, 1, metric.WithAttributes(PolicyKey.String(d.Policy), OutcomeKey.String(string(d.Outcome))))
	}
	if d.Outcome != redlimit.OutcomeSkipped {
		m.duration.Record(ctx, d.Duration.Seconds(), pa.duration...)
	}
}

// policy returns the measurement options of the policy named name,
// building them on its first decision.
func (m *Metrics) policy(name string) *policyAttrs {
	if pa, ok := m.policies.Load(name); ok {
		return pa.(*policyAttrs)
	}
	pa := &policyAttrs{duration: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(PolicyKey.String(name)))},
		outcomes: make(map[redlimit.Outcome][]metric.AddOption, len(redlimit.Outcomes()))}
	for _, o := range redlimit.Outcomes() {
		set := attribute.NewSet(PolicyKey.String(name), OutcomeKey.String(string(o)))
		pa.outcomes[o] = []metric.AddOption{metric.WithAttributeSet(set)}
	}
	actual, _ := m.policies.LoadOrStore(name, pa)
	return actual.(*policyAttrs)
}

// WatchLimiter reports lim's breaker state as redlimit.breaker.open with
// the attribute redlimit.limiter=name: 1 while it is open, 0 otherwise,
// read from lim.Stats() at each collection; how many times it opened as
// redlimit.breaker.opens; and its other counters (settlements, releases,
// state losses: the names above). Watch
// each Limiter once, under a name of its own; a name already watched, or an
// empty one, is an error, as is a nil or zero Limiter (make it with
// core.New).
func (m *Metrics) WatchLimiter(lim *core.Limiter, name string) error {
	switch {
	case lim.Validate() != nil:
		return fmt.Errorf("otellimit: WatchLimiter: %w", lim.Validate())
	case name == "":
		return errors.New("otellimit: WatchLimiter: empty name")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.limiters {
		if w.name == name {
			return fmt.Errorf("otellimit: WatchLimiter: a Limiter named %q is already watched", name)
		}
	}
	opts := []metric.ObserveOption{metric.WithAttributeSet(attribute.NewSet(LimiterKey.String(name)))}
	m.limiters = append(m.limiters, watched{name: name, lim: lim, opts: opts})
	return nil
}

// observeBreakers is the callback of the observable instruments: the
// breaker gauge and counter, and the settlement counters.
func (m *Metrics) observeBreakers(_ context.Context, o metric.Observer) error {
	m.mu.Lock()
	limiters := slices.Clone(m.limiters)
	m.mu.Unlock()
	for _, w := range limiters {
		stats := w.lim.Stats()
		var v int64
		if stats.BreakerOpen {
			v = 1
		}
		o.ObserveInt64(m.breakerOpen, v, w.opts...)
		o.ObserveInt64(m.breakerOpens, int64(stats.BreakerOpens), w.opts...)
		o.ObserveInt64(m.failed, int64(stats.FailedSettlements), w.opts...)
		o.ObserveInt64(m.retried, int64(stats.RetriedReleases), w.opts...)
		o.ObserveInt64(m.abandoned, int64(stats.AbandonedReleases), w.opts...)
		o.ObserveInt64(m.losses, int64(stats.StateLosses), w.opts...)
	}
	return nil
}
