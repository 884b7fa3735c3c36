// Package promlimit exports redlimit's decisions as Prometheus metrics,
// through github.com/prometheus/client_golang. It is a module of its own, so
// that users of redlimit who do not use Prometheus never download it.
//
//	metrics, err := promlimit.New(prometheus.DefaultRegisterer)         // construct and register
//	h := nethttp.New(lim, core.PerMinute(100), metrics.Observer())(api) // plug into the middleware
//	mux.Handle("GET /metrics", promhttp.Handler())                      // expose
//
// The metrics (the *Name constants; docs/metrics.md lists the same, and a
// test holds the three together):
//
//	redlimit_decisions_total{policy,outcome}         counter
//	redlimit_decision_duration_seconds{policy}       histogram (DefaultBuckets)
//	redlimit_breaker_open{limiter}                   gauge, 1 while open (WatchLimiter)
//	redlimit_breaker_opens_total{limiter}            counter, openings (WatchLimiter)
//	redlimit_settlements_failed_total{limiter}       counter, failed settlements (WatchLimiter)
//	redlimit_releases_retried_total{limiter}         counter, slots freed after them (WatchLimiter)
//	redlimit_releases_abandoned_total{limiter}       counter, slots left to their lease (WatchLimiter)
//	redlimit_state_losses_total{limiter}             counter, Redis servers seen to lose the limits' state (WatchLimiter)
//
// outcome is one of the redlimit.Outcome values: allowed, denied,
// denied_cached, dry_run_denied, local, error, invalid, skipped. policy is
// the policy's name (redlimit.WithName, its limits by default, or a rules
// table's pattern): a set fixed when the middleware is built, never taken
// from a request's path or key, so the number of series is bounded by the
// policies you configure times eight outcomes.
package promlimit

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// The metric names.
const (
	// DecisionsName counts decisions, by policy and outcome.
	DecisionsName = "redlimit_decisions_total"
	// DurationName is the histogram of how long decisions took, Redis
	// included, by policy. Skipped requests are not in it.
	DurationName = "redlimit_decision_duration_seconds"
	// BreakerName is 1 while a Limiter's breaker is open (Redis kept
	// failing; decisions fail at once), else 0, by limiter.
	BreakerName = "redlimit_breaker_open"
	// BreakerOpensName counts the times a Limiter's breaker opened since
	// the Limiter was created, by limiter: an opening shows even if the
	// breaker closed again before the scrape.
	BreakerOpensName = "redlimit_breaker_opens_total"
	// SettlementsFailedName counts a Limiter's reservation settlements
	// (Settle, Release, the middleware's) that failed since the Limiter
	// was created, by limiter (core.Stats.FailedSettlements).
	SettlementsFailedName = "redlimit_settlements_failed_total"
	// ReleasesRetriedName counts the failed settlements whose Concurrency
	// slots the Limiter then freed in the background, by limiter
	// (core.Stats.RetriedReleases).
	ReleasesRetriedName = "redlimit_releases_retried_total"
	// ReleasesAbandonedName counts the failed settlements whose slots the
	// Limiter stopped trying to free (their lease ended first, which frees
	// them), by limiter (core.Stats.AbandonedReleases).
	ReleasesAbandonedName = "redlimit_releases_abandoned_total"
	// StateLossesName counts the times a Limiter saw a Redis server lose
	// the state of its limits (a restart without persistence, FLUSHALL, a
	// failover to an empty replica) since the Limiter was created, by
	// limiter (core.Stats.StateLosses; core.WithLossCheck). Alert on any
	// increase: the counts on that server start again.
	StateLossesName = "redlimit_state_losses_total"
)

// The label names.
const (
	// PolicyLabel is the policy's name (redlimit.Decision.Policy).
	PolicyLabel = "policy"
	// OutcomeLabel is what became of the request
	// (redlimit.Decision.Outcome).
	OutcomeLabel = "outcome"
	// LimiterLabel is the name given to WatchLimiter.
	LimiterLabel = "limiter"
)

// DefaultBuckets returns the duration histogram's default upper bounds, in
// seconds: from 100 µs (a decision on a local Redis, or answered by the
// deny cache or an open breaker) through 1 ms (a round trip within a data
// centre), 100 ms (the default timeout, core.DefaultTimeout) up to 1 s (a
// long timeout, or a shaping limit's wait); slower decisions fall in +Inf.
// otellimit uses the same bounds.
func DefaultBuckets() []float64 {
	return []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
}

// Option configures Metrics.
type Option func(*config)

type config struct {
	buckets     []float64
	constLabels prometheus.Labels
}

// WithBuckets sets the duration histogram's upper bounds, in seconds,
// increasing. The default is DefaultBuckets().
func WithBuckets(bounds ...float64) Option {
	return func(c *config) { c.buckets = slices.Clone(bounds) }
}

// WithConstLabels adds labels with fixed values to every metric, to tell
// apart several Metrics registered in one registry (say, one per app
// served by a process): give each the same label names, with values of its
// own, as a registry requires. The default adds none.
func WithConstLabels(labels prometheus.Labels) Option {
	return func(c *config) { c.constLabels = labels }
}

// Metrics counts and times redlimit's decisions. Create it with New, plug
// it into policies with Observer (or call Observe from an observer of your
// own), and watch Limiters' breakers with WatchLimiter. It is a
// prometheus.Collector of all its metrics. It is safe for concurrent use.
type Metrics struct {
	decisions *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	breaker   *breakerCollector

	// policies caches each policy's counters and histogram, so that a
	// decision costs a map look-up instead of hashing label values:
	// policy name -> *policyMetrics.
	policies sync.Map
	observe  func(*http.Request, redlimit.Decision)
}

// policyMetrics are one policy's series.
type policyMetrics struct {
	outcomes map[redlimit.Outcome]prometheus.Counter // every Outcome's
	duration prometheus.Observer
}

// New returns Metrics registered with reg (prometheus.DefaultRegisterer,
// or a registry of your own). With a nil reg it registers nothing: register
// the Metrics, a prometheus.Collector, yourself. An error is a registration
// error (say, a second Metrics with the same constant labels in one
// registry) or invalid buckets.
func New(reg prometheus.Registerer, opts ...Option) (*Metrics, error) {
	c := config{buckets: DefaultBuckets()}
	for _, opt := range opts {
		opt(&c)
	}
	if len(c.buckets) == 0 {
		return nil, errors.New("promlimit: WithBuckets without buckets")
	}
	for i := 1; i < len(c.buckets); i++ {
		if c.buckets[i] <= c.buckets[i-1] {
			return nil, fmt.Errorf("promlimit: buckets %v are not increasing", c.buckets)
		}
	}
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        DecisionsName,
			Help:        "Rate limit decisions, by policy and outcome (allowed, denied, denied_cached, dry_run_denied, local, error, invalid, skipped).",
			ConstLabels: c.constLabels,
		}, []string{PolicyLabel, OutcomeLabel}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        DurationName,
			Help:        "How long rate limit decisions took, Redis included, by policy; skipped requests are not counted.",
			Buckets:     c.buckets,
			ConstLabels: c.constLabels,
		}, []string{PolicyLabel}),
		breaker: &breakerCollector{
			open: prometheus.NewDesc(BreakerName,
				"1 while the Limiter's circuit breaker is open (Redis kept failing and decisions fail at once), else 0.",
				[]string{LimiterLabel}, c.constLabels),
			opens: prometheus.NewDesc(BreakerOpensName,
				"Times the Limiter's circuit breaker opened since the Limiter was created.",
				[]string{LimiterLabel}, c.constLabels),
			failed: prometheus.NewDesc(SettlementsFailedName,
				"Reservation settlements of the Limiter that failed (a timeout, a lost connection, an open breaker).",
				[]string{LimiterLabel}, c.constLabels),
			retried: prometheus.NewDesc(ReleasesRetriedName,
				"Failed settlements whose Concurrency slots the Limiter then freed in the background.",
				[]string{LimiterLabel}, c.constLabels),
			abandoned: prometheus.NewDesc(ReleasesAbandonedName,
				"Failed settlements whose Concurrency slots the Limiter stopped trying to free (their lease frees them).",
				[]string{LimiterLabel}, c.constLabels),
			losses: prometheus.NewDesc(StateLossesName,
				"Times the Limiter saw a Redis server lose the limits' state (a restart without persistence, FLUSHALL, a failover to an empty replica).",
				[]string{LimiterLabel}, c.constLabels),
		},
	}
	m.observe = m.Observe
	if reg != nil {
		if err := reg.Register(m); err != nil {
			return nil, fmt.Errorf("promlimit: %w", err)
		}
	}
	return m, nil
}

// Observer returns the option that plugs m into a policy:
// redlimit.WithObserver(m.Observe). Give it to every middleware (or rules
// table) whose decisions m should count.
//
// Observer composes with other observers: every WithObserver option of a
// policy sees every decision. It counts requests of every protocol: give
// it to grpclimit.With for gRPC calls, which have no *http.Request.
func (m *Metrics) Observer() redlimit.Option { return redlimit.WithObserver(m.observe) }

// Observe counts d under its policy and outcome and, unless the request
// was skipped, records d.Duration. It is the observer Observer plugs in,
// for calling from an observer of your own. It allocates nothing once a
// policy has been seen.
func (m *Metrics) Observe(_ *http.Request, d redlimit.Decision) {
	pm := m.policy(d.Policy)
	if c, ok := pm.outcomes[d.Outcome]; ok {
		c.Inc()
	} else {
		m.decisions.WithLabelValues(d.Policy, string(d.Outcome)).Inc()
	}
	if d.Outcome != redlimit.OutcomeSkipped {
		pm.duration.Observe(d.Duration.Seconds())
	}
}

// policy returns the series of the policy named name, creating them on
// its first decision.
func (m *Metrics) policy(name string) *policyMetrics {
	if pm, ok := m.policies.Load(name); ok {
		return pm.(*policyMetrics)
	}
	pm := &policyMetrics{duration: m.duration.WithLabelValues(name),
		outcomes: make(map[redlimit.Outcome]prometheus.Counter, len(redlimit.Outcomes()))}
	for _, o := range redlimit.Outcomes() {
		pm.outcomes[o] = m.decisions.WithLabelValues(name, string(o))
	}
	actual, _ := m.policies.LoadOrStore(name, pm)
	return actual.(*policyMetrics)
}

// WatchLimiter exports lim's breaker state as redlimit_breaker_open with
// the label limiter="name": 1 while it is open, 0 otherwise, read from
// lim.Stats() at each scrape; how many times it opened as
// redlimit_breaker_opens_total; and its other counters (settlements,
// releases, state losses: the names above). Watch each
// Limiter once, under a name of its own; a name already watched, or an
// empty one, is an error, as is a nil or zero Limiter (make it with
// core.New).
func (m *Metrics) WatchLimiter(lim *core.Limiter, name string) error {
	return m.breaker.watch(lim, name)
}

// Describe sends the descriptors of m's metrics; with Collect, it makes
// Metrics a prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.decisions.Describe(ch)
	m.duration.Describe(ch)
	m.breaker.Describe(ch)
}

// Collect sends m's metrics.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.decisions.Collect(ch)
	m.duration.Collect(ch)
	m.breaker.Collect(ch)
}

var _ prometheus.Collector = (*Metrics)(nil)

// breakerCollector reads the breakers of the watched Limiters at scrape
// time.
type breakerCollector struct {
	open      *prometheus.Desc // BreakerName
	opens     *prometheus.Desc // BreakerOpensName
	failed    *prometheus.Desc // SettlementsFailedName
	retried   *prometheus.Desc // ReleasesRetriedName
	abandoned *prometheus.Desc // ReleasesAbandonedName
	losses    *prometheus.Desc // StateLossesName

	mu       sync.Mutex
	limiters []watched
}

type watched struct {
	name string
	lim  *core.Limiter
}

func (b *breakerCollector) watch(lim *core.Limiter, name string) error {
	switch {
	case lim.Validate() != nil:
		return fmt.Errorf("promlimit: WatchLimiter: %w", lim.Validate())
	case name == "":
		return errors.New("promlimit: WatchLimiter: empty name")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, w := range b.limiters {
		if w.name == name {
			return fmt.Errorf("promlimit: WatchLimiter: a Limiter named %q is already watched", name)
		}
	}
	b.limiters = append(b.limiters, watched{name: name, lim: lim})
	return nil
}

func (b *breakerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- b.open
	ch <- b.opens
	ch <- b.failed
	ch <- b.retried
	ch <- b.abandoned
	ch <- b.losses
}

func (b *breakerCollector) Collect(ch chan<- prometheus.Metric) {
	b.mu.Lock()
	limiters := slices.Clone(b.limiters)
	b.mu.Unlock()
	for _, w := range limiters {
		stats := w.lim.Stats()
		v := 0.0
		if stats.BreakerOpen {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(b.open, prometheus.GaugeValue, v, w.name)
		ch <- prometheus.MustNewConstMetric(b.opens, prometheus.CounterValue, float64(stats.BreakerOpens), w.name)
		ch <- prometheus.MustNewConstMetric(b.failed, prometheus.CounterValue, float64(stats.FailedSettlements), w.name)
		ch <- prometheus.MustNewConstMetric(b.retried, prometheus.CounterValue, float64(stats.RetriedReleases), w.name)
		ch <- prometheus.MustNewConstMetric(b.abandoned, prometheus.CounterValue, float64(stats.AbandonedReleases), w.name)
		ch <- prometheus.MustNewConstMetric(b.losses, prometheus.CounterValue, float64(stats.StateLosses), w.name)
	}
}
