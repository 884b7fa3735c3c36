package envoyrls_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/envoyrls"
	"github.com/redlimit/redlimit/internal/redistest"
)

// t0 is the tests' clock at start: a Tuesday.
var t0 = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)

// clock is a settable clock for Limiters.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(t0.UnixNano())
	return c
}
func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) add(d time.Duration) { c.ns.Add(int64(d)) }
func (c *clock) limiter(rdb redis.Scripter) *core.Limiter {
	return core.New(rdb, core.WithClock(c.now), core.WithTimeout(10*time.Second))
}

// serve serves srv over gRPC on a free loopback port and returns Envoy's
// generated client of it.
func serve(t *testing.T, srv *envoyrls.Server) rlsv3.RateLimitServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, srv)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc)
}

// newServer returns a Server of the configuration in dir on lim.
func newServer(t *testing.T, lim *core.Limiter, dir string, opts envoyrls.Options) *envoyrls.Server {
	t.Helper()
	c, err := envoyrls.LoadConfig(dir, envoyrls.ConfigOptions{})
	return mustServer(t, lim, c, err, opts)
}

// yamlServer returns a Server of one YAML document on lim.
func yamlServer(t *testing.T, lim *core.Limiter, doc string, opts envoyrls.Options) *envoyrls.Server {
	t.Helper()
	c, err := envoyrls.ParseConfig([]envoyrls.File{{Name: "test.yaml", Data: []byte(doc)}}, envoyrls.ConfigOptions{})
	return mustServer(t, lim, c, err, opts)
}

// mustServer returns a Server of c on lim, or fails the test on err (the
// configuration's) or New's.
func mustServer(t *testing.T, lim *core.Limiter, c *envoyrls.Config, err error, opts envoyrls.Options) *envoyrls.Server {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := envoyrls.New(lim, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// desc builds a descriptor of key, value pairs.
func desc(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// ask sends one request and returns its answer.
func ask(t *testing.T, c rlsv3.RateLimitServiceClient, domain string, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// codes writes the overall code and the statuses' codes of n requests:
// "OK OK OVER_LIMIT".
func overall(t *testing.T, c rlsv3.RateLimitServiceClient, n int, domain string, ds ...*ratelimitv3.RateLimitDescriptor) string {
	t.Helper()
	var out []string
	for range n {
		out = append(out, ask(t, c, domain, ds...).GetOverallCode().String())
	}
	return strings.Join(out, " ")
}

func want(t *testing.T, what, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s:\n got %s\nwant %s", what, got, want)
	}
}

// repeat writes s n times, space-separated.
func repeat(s string, n int) string {
	return strings.TrimSpace(strings.Repeat(s+" ", n))
}

// TestReferenceExamples: the README examples of the reference server,
// asked with Envoy's client, mean what its README says they mean.
func TestReferenceExamples(t *testing.T) {
	t.Parallel()
	clk := newClock()
	c := serve(t, newServer(t, clk.limiter(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})), "testdata/reference", envoyrls.Options{}))

	// Example 1: 500 a second for each database.
	want(t, "mongo_cps users", overall(t, c, 3, "mongo_cps", desc("database", "users")), "OK OK OK")
	r := ask(t, c, "mongo_cps", desc("database", "users"))
	st := r.GetStatuses()[0]
	if st.GetCurrentLimit().GetRequestsPerUnit() != 500 || st.GetCurrentLimit().GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || st.GetLimitRemaining() != 496 {
		t.Errorf("mongo_cps status %v", st)
	}
	if d := st.GetDurationUntilReset().AsDuration(); d <= 0 || d > time.Second {
		t.Errorf("duration_until_reset %v", d)
	}
	want(t, "an unknown database", overall(t, c, 1, "mongo_cps", desc("database", "orders")), "OK")
	if st := ask(t, c, "mongo_cps", desc("database", "orders")).GetStatuses()[0]; st.GetCurrentLimit() != nil {
		t.Errorf("no rule, but current_limit %v", st.GetCurrentLimit())
	}

	// Example 2: 5 marketing messages a day per number, 100 messages a
	// day per number; both descriptors in one request.
	mk := func(n string) []*ratelimitv3.RateLimitDescriptor {
		return []*ratelimitv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", n), desc("to_number", n)}
	}
	want(t, "marketing to 2061111111", overall(t, c, 6, "messaging", mk("2061111111")...), "OK OK OK OK OK OVER_LIMIT")
	want(t, "marketing to 2062222222", overall(t, c, 1, "messaging", mk("2062222222")...), "OK")
	r = ask(t, c, "messaging", mk("2061111111")...)
	if a, b := r.GetStatuses()[0], r.GetStatuses()[1]; a.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || b.GetCode() != rlsv3.RateLimitResponse_OK || b.GetLimitRemaining() != 95 {
		t.Errorf("statuses %v; %v: the per-number count must hold only the 5 admitted", a, b)
	}

	// Example 3: 10 a second per address, 50.0.0.5 never.
	want(t, "50.0.0.1", overall(t, c, 11, "edge_proxy_per_ip", desc("remote_address", "50.0.0.1")), repeat("OK", 10)+" OVER_LIMIT")
	want(t, "50.0.0.5", overall(t, c, 1, "edge_proxy_per_ip", desc("remote_address", "50.0.0.5")), "OVER_LIMIT")
	clk.add(time.Second)
	want(t, "50.0.0.1 a second later", overall(t, c, 1, "edge_proxy_per_ip", desc("remote_address", "50.0.0.1")), "OK")

	// Example 4: a rule applies at its depth only.
	want(t, "example4", overall(t, c, 301, "example4", desc("key", "value", "subkey", "subvalue")), repeat("OK", 300)+" OVER_LIMIT")
	want(t, "example4, one entry", overall(t, c, 1, "example4", desc("key", "value")), "OK")

	// Example 5: unlimited.
	st = ask(t, c, "internal", desc("ldap", "x")).GetStatuses()[0]
	if st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetLimitRemaining() != math.MaxUint32 {
		t.Errorf("unlimited: %v", st)
	}

	// Example 6: user-a in shadow mode, user-b 20 a second.
	r = ask(t, c, "example6", desc("service", "auth-service", "user", "user-a"))
	for range 12 {
		r = ask(t, c, "example6", desc("service", "auth-service", "user", "user-a"))
	}
	if r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit() != 10 {
		t.Errorf("shadow mode: %v", r)
	}
	want(t, "user-b", overall(t, c, 21, "example6", desc("service", "auth-service", "user", "user-b")), repeat("OK", 20)+" OVER_LIMIT")

	// Example 7: the replacing rule alone applies when both match.
	both := []*ratelimitv3.RateLimitDescriptor{desc("key_1", "value_1", "user", "bkthomps"), desc("key_2", "value_2", "user", "bkthomps")}
	want(t, "both", overall(t, c, 11, "example7", both...), repeat("OK", 10)+" OVER_LIMIT")
	want(t, "the replaced rule's state is untouched", overall(t, c, 6, "example7", desc("key_1", "value_1", "user", "bkthomps")), repeat("OK", 5)+" OVER_LIMIT")

	// Example 9: a wildcard value; each value its own count.
	want(t, "value_1", overall(t, c, 21, "example9", desc("key1", "value_1")), repeat("OK", 20)+" OVER_LIMIT")
	want(t, "value_2", overall(t, c, 1, "example9", desc("key1", "value_2")), "OK")
	want(t, "no match", overall(t, c, 1, "example9", desc("key1", "other")), "OK")

	// Example 11: files/* share one count; files_no_share/* do not.
	want(t, "files/*", overall(t, c, 5, "example11", desc("files", "files/a.pdf"))+" "+overall(t, c, 5, "example11", desc("files", "files/b.csv"))+" "+overall(t, c, 1, "example11", desc("files", "files/c.txt")), repeat("OK", 10)+" OVER_LIMIT")
	want(t, "files_no_share/*", overall(t, c, 11, "example11", desc("files_no_share", "files_no_share/a.pdf"))+" "+overall(t, c, 1, "example11", desc("files_no_share", "files_no_share/b.csv")), repeat("OK", 10)+" OVER_LIMIT OK")

	// The reference tests' basic configuration: a key/value override, a
	// whitelisted value, a deeper key.
	want(t, "key2 value2: 30 a minute", overall(t, c, 31, "test-domain", desc("key2", "value2")), repeat("OK", 30)+" OVER_LIMIT")
	want(t, "key2 value3: whitelisted", overall(t, c, 40, "test-domain", desc("key2", "value3")), repeat("OK", 40))
	want(t, "key1 value1 subkey1 any: 5 a second", overall(t, c, 6, "test-domain", desc("key1", "value1", "subkey1", "x")), repeat("OK", 5)+" OVER_LIMIT")

	// Errors Envoy's client gets for requests the reference refuses too.
	for _, req := range []*rlsv3.RateLimitRequest{{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "b")}}, {Domain: "x"}} {
		if _, err := c.ShouldRateLimit(t.Context(), req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%v: %v", req, err)
		}
	}
	if r := ask(t, c, "no-such-domain", desc("a", "b")); r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Errorf("unknown domain: %v", r)
	}
}

// TestHitsAddend: the request's hits_addend, a descriptor's own (0
// included), and one too large to ever fit.
func TestHitsAddend(t *testing.T) {
	t.Parallel()
	clk := newClock()
	c := serve(t, yamlServer(t, clk.limiter(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})), `
domain: ai
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000}
`, envoyrls.Options{}))
	req := func(hits uint32, d *ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		resp, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}, HitsAddend: hits})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	got := func(r *rlsv3.RateLimitResponse) string {
		return fmt.Sprint(r.GetOverallCode(), " ", r.GetStatuses()[0].GetLimitRemaining())
	}
	want(t, "600 hits", got(req(600, desc("tenant", "a"))), "OK 400")
	want(t, "500 hits: over, nothing charged", got(req(500, desc("tenant", "a"))), "OVER_LIMIT 400")
	d := desc("tenant", "a")
	d.HitsAddend = wrapperspb.UInt64(0)
	want(t, "a descriptor's 0 reads", got(req(900, d)), "OK 400")
	d.HitsAddend = wrapperspb.UInt64(400)
	want(t, "a descriptor's 400 overrides the request's", got(req(900, d)), "OK 0")
	d.HitsAddend = wrapperspb.UInt64(1 << 40)
	want(t, "far too many", got(req(0, d)), "OVER_LIMIT 0")
	want(t, "0 means 1", got(req(0, desc("tenant", "b"))), "OK 999")
}

// TestLargeHits: requests_per_unit takes a uint32's whole range, and
// hits_addend up to it is charged exactly; a debt rule charges hits above
// the most one settlement takes that most, never nothing (issue 32); a
// request that can never pass is told to retry after the limit's period,
// not after InfDuration's 9223372036 seconds.
func TestLargeHits(t *testing.T) {
	t.Parallel()
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		largeHits(t, redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()}))
	})
	t.Run("redis-server", func(t *testing.T) {
		t.Parallel()
		largeHits(t, redistest.Standalone(t).Client(t))
	})
}

func largeHits(t *testing.T, rdb redis.Scripter) {
	clk := newClock()
	c := serve(t, yamlServer(t, clk.limiter(rdb), `
domain: big
descriptors:
  - key: u32
    rate_limit: {unit: hour, requests_per_unit: 4294967295}
  - key: second
    rate_limit: {unit: second, requests_per_unit: 4294967295, algorithm: gcra}
  - key: ref
    value: a
    rate_limit: {unit: minute, requests_per_unit: 1000000001}
  - key: ref
    value: b
    rate_limit: {unit: day, requests_per_unit: 2000000000}
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 100000, debt: true}
  - key: bigdebt
    rate_limit: {unit: hour, requests_per_unit: 4294967295, debt: true}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1000}
`, envoyrls.Options{}))
	hits := func(key, value string, n uint64) *rlsv3.RateLimitResponse {
		d := desc(key, value)
		d.HitsAddend = wrapperspb.UInt64(n)
		return ask(t, c, "big", d)
	}
	got := func(r *rlsv3.RateLimitResponse) string {
		s := fmt.Sprint(r.GetOverallCode(), " ", r.GetStatuses()[0].GetLimitRemaining())
		for _, h := range r.GetResponseHeadersToAdd() {
			if h.GetKey() == "retry-after" {
				s += " retry-after " + h.GetValue()
			}
		}
		return s
	}

	want(t, "4294967295 an hour, 2e9 hits", got(hits("u32", "x", 2_000_000_000)), "OK 2294967295")
	want(t, "the rest", got(hits("u32", "x", 2_294_967_295)), "OK 0")
	want(t, "one more", got(hits("u32", "x", 1)), "OVER_LIMIT 0 retry-after 3600")
	want(t, "4294967295 a second, GCRA", got(hits("second", "x", 4_294_967_295)), "OK 0")
	want(t, "1000000001 a minute", got(hits("ref", "a", 1_000_000_001)), "OK 0")
	want(t, "2000000000 a day", got(hits("ref", "b", 1)), "OK 1999999999")

	// A debt rule charges hits in full up to the most a settlement takes,
	// and that most above it: the key is in debt, the request itself is
	// admitted.
	want(t, "debt of 2e9", got(hits("tokens", "a", 2_000_000_000)), "OK 0")
	want(t, "in debt", got(hits("tokens", "a", 1)), "OVER_LIMIT 0 retry-after 60")
	want(t, "debt of 5e9", got(hits("tokens", "b", 5_000_000_000)), "OK 0")
	want(t, "in debt after 5e9", got(hits("tokens", "b", 1)), "OVER_LIMIT 0 retry-after 60")
	// Where the limit takes the most, the charge shows exactly.
	want(t, "2e9 of 4294967295", got(hits("bigdebt", "a", 2_000_000_000)), "OK 2294967295")
	want(t, "5e9 charged 4294967295", got(hits("bigdebt", "b", 5_000_000_000)), "OK 0")
	want(t, "then a read", got(hits("bigdebt", "b", 0)), "OK 0")
	want(t, "then one", got(hits("bigdebt", "b", 1)), "OVER_LIMIT 0 retry-after 3600")

	// A request that can never pass waits the limit's period, whether its
	// hits are above what the limit holds or above what a settlement takes.
	want(t, "2e9 of 1000 a minute", got(hits("plain", "a", 2_000_000_000)), "OVER_LIMIT 1000 retry-after 60")
	want(t, "5e9 of 1000 a minute", got(hits("plain", "a", 5_000_000_000)), "OVER_LIMIT 0 retry-after 60")
	want(t, "nothing was charged", got(hits("plain", "a", 1000)), "OK 0")
	r := hits("plain", "b", 1<<40)
	if d := r.GetStatuses()[0].GetDurationUntilReset().AsDuration(); d < 0 || d > time.Minute {
		t.Errorf("2^40 hits: duration_until_reset %v, want at most the period", d)
	}
}

// TestRefund: a request that one descriptor denies is charged to none of
// the others, unless ChargeDenied, the reference server's way.
func TestRefund(t *testing.T) {
	t.Parallel()
	const doc = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: ip
    value: 192.0.2.66
    rate_limit: {unit: second, requests_per_unit: 0}
`
	for _, charge := range []bool{false, true} {
		clk := newClock()
		c := serve(t, yamlServer(t, clk.limiter(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})), doc, envoyrls.Options{ChargeDenied: charge}))
		want(t, "route /a", overall(t, c, 4, "d", desc("user", "u"), desc("route", "/a")), "OK OK OVER_LIMIT OVER_LIMIT")
		remaining := ask(t, c, "d", desc("user", "u")).GetStatuses()[0].GetLimitRemaining()
		if w := map[bool]uint32{false: 7, true: 5}[charge]; remaining != w {
			t.Errorf("ChargeDenied %v: the user has %d left, want %d", charge, remaining, w)
		}
		// A descriptor that denies every request (requests_per_unit: 0)
		// without asking Redis.
		want(t, "a blocked address", overall(t, c, 2, "d", desc("user", "u"), desc("ip", "192.0.2.66")), "OVER_LIMIT OVER_LIMIT")
		remaining = ask(t, c, "d", desc("user", "u")).GetStatuses()[0].GetLimitRemaining()
		if w := map[bool]uint32{false: 6, true: 2}[charge]; remaining != w {
			t.Errorf("ChargeDenied %v, blocked address: the user has %d left, want %d", charge, remaining, w)
		}
	}
}

// TestHeaders: the fields Envoy adds to the client's response.
func TestHeaders(t *testing.T) {
	t.Parallel()
	const doc = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, name: per-user}
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 100, algorithm: gcra, burst: 5}
`
	fields := func(r *rlsv3.RateLimitResponse) string {
		var out []string
		for _, h := range r.GetResponseHeadersToAdd() {
			out = append(out, h.GetKey()+": "+h.GetValue())
		}
		return strings.Join(out, "\n")
	}
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	clk := newClock()
	c := serve(t, yamlServer(t, clk.limiter(rdb), doc, envoyrls.Options{}))
	ask(t, c, "d", desc("user", "u"))
	want(t, "X-RateLimit", fields(ask(t, c, "d", desc("user", "u"), desc("route", "/"))), "x-ratelimit-limit: 3\nx-ratelimit-remaining: 1\nx-ratelimit-reset: 60")
	ask(t, c, "d", desc("user", "u"))
	want(t, "X-RateLimit denied", fields(ask(t, c, "d", desc("user", "u"), desc("route", "/"))), "retry-after: 60\nx-ratelimit-limit: 3\nx-ratelimit-remaining: 0\nx-ratelimit-reset: 60")

	c = serve(t, yamlServer(t, clk.limiter(rdb), doc, envoyrls.Options{Headers: redlimit.HeadersDraft}))
	want(t, "draft", fields(ask(t, c, "d", desc("user", "v"), desc("route", "/x"))),
		`ratelimit-policy: "per-user";q=3;w=60, "d.route";q=100;w=3600;redlimit-burst=5`+"\n"+
			`ratelimit: "per-user";r=2;t=60, "d.route";r=4;t=36`)

	c = serve(t, yamlServer(t, clk.limiter(rdb), doc, envoyrls.Options{HeaderNames: envoyrls.HeaderNames{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}}))
	want(t, "the reference's names", fields(ask(t, c, "d", desc("user", "w"))), "ratelimit-limit: 3\nratelimit-remaining: 2\nratelimit-reset: 60")

	c = serve(t, yamlServer(t, clk.limiter(rdb), doc, envoyrls.Options{Headers: redlimit.HeadersNone}))
	want(t, "none", fields(ask(t, c, "d", desc("user", "w"))), "")
}

// TestHeadersCalendar: a calendar month's draft field announces the
// month it is in, as long as it is (2 592 000 s in November), never the
// mean month's 2 629 746 s.
func TestHeadersCalendar(t *testing.T) {
	t.Parallel()
	const doc = `
domain: d
descriptors:
  - key: tenant
    rate_limit: {unit: month, requests_per_unit: 60, calendar: UTC, name: quota}
`
	month := func() int64 {
		now := time.Now().UTC()
		first := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
		return int64(first.AddDate(0, 1, 0).Sub(first) / time.Second)
	}
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	c := serve(t, yamlServer(t, core.New(rdb), doc, envoyrls.Options{Headers: redlimit.HeadersDraft}))
	before := month()
	r := ask(t, c, "d", desc("tenant", "acme"))
	if month() != before {
		t.Skip("the month changed during the request") // a moment once a month
	}
	var got string
	for _, h := range r.GetResponseHeadersToAdd() {
		if h.GetKey() == "ratelimit-policy" {
			got = h.GetValue()
		}
	}
	if want := `"quota";q=60;w=` + strconv.FormatInt(before, 10); got != want {
		t.Errorf("ratelimit-policy %q, want %q", got, want)
	}
}

// TestExtensions: algorithm, burst, a calendar month in a zone, a limit
// the request overrides, and debt for tokens counted after a stream.
func TestExtensions(t *testing.T) {
	t.Parallel()
	clk := newClock()
	c := serve(t, yamlServer(t, clk.limiter(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})), `
domain: x
descriptors:
  - key: smooth
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 2}
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 3, calendar: Europe/Berlin}
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 1000, debt: true}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 5}
`, envoyrls.Options{}))
	want(t, "gcra burst 2", overall(t, c, 3, "x", desc("smooth", "a")), "OK OK OVER_LIMIT")
	clk.add(100 * time.Millisecond)
	want(t, "gcra, 100 ms later", overall(t, c, 2, "x", desc("smooth", "a")), "OK OVER_LIMIT")

	want(t, "month", overall(t, c, 4, "x", desc("monthly", "a")), "OK OK OK OVER_LIMIT")
	r := ask(t, c, "x", desc("monthly", "a"))
	// 12:00 UTC on 10 March; April starts at 22:00 UTC on 31 March.
	if got, w := r.GetStatuses()[0].GetDurationUntilReset().AsDuration(), time.Date(2026, 3, 31, 22, 0, 0, 0, time.UTC).Sub(clk.now()); got != w {
		t.Errorf("month resets in %v, want %v", got, w)
	}
	if u := r.GetStatuses()[0].GetCurrentLimit().GetUnit(); u != rlsv3.RateLimitResponse_RateLimit_MONTH {
		t.Errorf("unit %v", u)
	}
	clk.add(time.Date(2026, 3, 31, 22, 0, 0, 0, time.UTC).Sub(clk.now()))
	want(t, "April in Berlin", overall(t, c, 1, "x", desc("monthly", "a")), "OK")

	// debt: 800 tokens, then 800 more (past the limit, charged), then
	// denied until the debt is paid off.
	tokens := func(n uint64) string {
		d := desc("tokens", "t")
		d.HitsAddend = wrapperspb.UInt64(n)
		r := ask(t, c, "x", d)
		return fmt.Sprint(r.GetOverallCode(), " ", r.GetStatuses()[0].GetLimitRemaining())
	}
	want(t, "800 tokens", tokens(800), "OK 200")
	want(t, "800 more", tokens(800), "OK 0")
	want(t, "in debt", tokens(1), "OVER_LIMIT 0")

	// A request's own limit (RateLimitOverride) replaces the rule's rate.
	d := desc("plain", "p")
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}
	want(t, "override 2/m", overall(t, c, 3, "x", d), "OK OK OVER_LIMIT")
	d = desc("unconfigured", "u")
	d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_HOUR}
	want(t, "override without a rule", overall(t, c, 2, "x", d), "OK OVER_LIMIT")
}

// TestFailure: with Redis gone, fail open answers OK, fail closed
// answers Unavailable.
func TestFailure(t *testing.T) {
	t.Parallel()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	lim := core.New(rdb, core.WithTimeout(200*time.Millisecond), core.WithLogger(slog.New(slog.DiscardHandler)))
	const doc = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
	var observed atomic.Int64
	quiet := slog.New(slog.DiscardHandler)
	open := serve(t, yamlServer(t, lim, doc, envoyrls.Options{Logger: quiet, Observe: func(d redlimit.Decision) {
		if d.Outcome == redlimit.OutcomeError && d.Err != nil {
			observed.Add(1)
		}
	}}))
	closed := serve(t, yamlServer(t, lim, doc, envoyrls.Options{Logger: quiet, Failure: redlimit.FailClosed}))
	mr.Close()
	r := ask(t, open, "d", desc("k", "v"))
	if r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetCurrentLimit() != nil {
		t.Errorf("fail open: %v", r)
	}
	if observed.Load() != 1 {
		t.Errorf("%d errors observed", observed.Load())
	}
	if _, err := closed.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k", "v")}}); status.Code(err) != codes.Unavailable {
		t.Errorf("fail closed: %v", err)
	}
	if _, err := envoyrls.New(lim, &envoyrls.Config{}, envoyrls.Options{Failure: redlimit.FailLocal}); err == nil {
		t.Error("FailLocal accepted")
	}
}

// TestZeroLimiter: a nil or zero Limiter, which cannot decide, is refused
// with an error saying to make one with core.New, not failed open on
// every request.
func TestZeroLimiter(t *testing.T) {
	t.Parallel()
	for _, lim := range []*core.Limiter{nil, {}} {
		if _, err := envoyrls.New(lim, &envoyrls.Config{}, envoyrls.Options{}); err == nil || !strings.Contains(err.Error(), "core.New") {
			t.Errorf("New(%p): %v; want refused, saying core.New", lim, err)
		}
	}
}

// TestShared: several servers, each with its own client of one Redis,
// asked concurrently, admit exactly the limit: on miniredis, and on
// redis-server standalone, cluster and behind Sentinel.
func TestShared(t *testing.T) {
	t.Parallel()
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		addr := miniredis.RunT(t).Addr()
		shared(t, func() redis.UniversalClient { return redis.NewClient(&redis.Options{Addr: addr}) })
	})
	redistest.Servers(t, func(t *testing.T, newClient func() redis.UniversalClient) {
		shared(t, newClient)
	})
}

func shared(t *testing.T, newClient func() redis.UniversalClient) {
	const doc = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 30, algorithm: sliding_log}
`
	clk := newClock()
	var clients []rlsv3.RateLimitServiceClient
	for range 4 {
		rdb := newClient()
		t.Cleanup(func() { rdb.Close() })
		clients = append(clients, serve(t, yamlServer(t, clk.limiter(rdb), doc, envoyrls.Options{})))
	}
	var ok, okPair atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for i := range 120 {
		wg.Go(func() {
			c := clients[i%len(clients)]
			r, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "alice")}})
			if err != nil {
				t.Error(err)
				return
			}
			if r.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				ok.Add(1)
			}
			// Two descriptors: bob's 50 and the route's 30; a request one
			// denies is charged to neither.
			r, err = c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "bob"), desc("route", "/r")}})
			if err != nil {
				t.Error(err)
				return
			}
			if r.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				okPair.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 50 {
		t.Errorf("alice: %d admitted, want 50", ok.Load())
	}
	// The pairs are decided per descriptor: in a race a refund may come
	// after another request was denied for the count it held, so fewer
	// may pass than an atomic decision would admit, never more; and what
	// each descriptor counts is exactly the requests admitted overall.
	pair := int(okPair.Load())
	if pair > 30 || pair == 0 {
		t.Errorf("bob on /r: %d admitted concurrently, want 1 to 30", pair)
	}
	read := func(kv ...string) int {
		d := desc(kv...)
		d.HitsAddend = wrapperspb.UInt64(0)
		return int(ask(t, clients[1], "d", d).GetStatuses()[0].GetLimitRemaining())
	}
	if b, r := read("user", "bob"), read("route", "/r"); b != 50-pair || r != 30-pair {
		t.Errorf("after %d admitted: bob has %d left, /r %d; want %d and %d", pair, b, r, 50-pair, 30-pair)
	}
	// Sequentially now: each instance's deny cache may still answer a
	// denial of /r for up to its staleness bound (a second, on the
	// Limiters' clock, which stands still here) after another instance's
	// refund; so after a denial the clock moves on by a little more, which
	// frees nothing of an hour's limits.
	for i := 0; i < 200 && okPair.Load() < 30; i++ {
		if ask(t, clients[i%4], "d", desc("user", "bob"), desc("route", "/r")).GetOverallCode() == rlsv3.RateLimitResponse_OK {
			okPair.Add(1)
		} else {
			clk.add(1100 * time.Millisecond)
		}
	}
	if okPair.Load() != 30 {
		t.Errorf("bob on /r: %d admitted in all, want 30", okPair.Load())
	}
	if r := ask(t, clients[0], "d", desc("user", "bob"), desc("route", "/r")); r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("bob on /r, the 31st: %v", r.GetOverallCode())
	}
}

// TestShadowMode: a rule in shadow_mode answers OK, its count kept (one
// in quota_mode denies when it is the only one); the global ShadowMode answers OK overall, the statuses
// still saying OVER_LIMIT, and a request Envoy lets through stays
// charged.
func TestShadowMode(t *testing.T) {
	t.Parallel()
	const doc = `
domain: d
descriptors:
  - key: soft
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: route
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	clk := newClock()
	c := serve(t, yamlServer(t, clk.limiter(rdb), doc, envoyrls.Options{}))
	want(t, "shadow_mode", overall(t, c, 3, "d", desc("soft", "a")), "OK OK OK")
	want(t, "quota_mode, alone", overall(t, c, 3, "d", desc("quota", "a")), "OK OVER_LIMIT OVER_LIMIT")
	if st := ask(t, c, "d", desc("soft", "a")).GetStatuses()[0]; st.GetCode() != rlsv3.RateLimitResponse_OK || st.GetLimitRemaining() != 0 || st.GetCurrentLimit() == nil {
		t.Errorf("shadow status %v", st)
	}

	g := serve(t, yamlServer(t, clk.limiter(rdb), doc, envoyrls.Options{ShadowMode: true}))
	want(t, "global shadow", overall(t, g, 3, "d", desc("user", "u"), desc("route", "/")), "OK OK OK")
	r := ask(t, g, "d", desc("user", "u"), desc("route", "/"))
	if r.GetStatuses()[0].GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || r.GetStatuses()[1].GetLimitRemaining() != 1 {
		t.Errorf("global shadow statuses: %v", r.GetStatuses())
	}
	for _, h := range r.GetResponseHeadersToAdd() {
		if h.GetKey() == "retry-after" {
			t.Errorf("retry-after on an OK answer")
		}
	}
}

// TestShareThreshold: the reference server's share_threshold test
// configuration: values matching a shared wildcard share one count, at
// any depth, and an explicit value keeps its own.
func TestShareThreshold(t *testing.T) {
	t.Parallel()
	c := serve(t, newServer(t, newClock().limiter(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})), "testdata/share", envoyrls.Options{}))
	hits := func(n uint32, ds ...*ratelimitv3.RateLimitDescriptor) string {
		resp, err := c.ShouldRateLimit(t.Context(), &rlsv3.RateLimitRequest{Domain: "test-domain", Descriptors: ds, HitsAddend: n})
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(resp.GetOverallCode(), " ", resp.GetStatuses()[0].GetLimitRemaining())
	}
	want(t, "files/a.pdf", hits(60, desc("files", "files/a.pdf")), "OK 40")
	want(t, "files/b.csv shares it", hits(40, desc("files", "files/b.csv")), "OK 0")
	want(t, "files/c.txt", hits(1, desc("files", "files/c.txt")), "OVER_LIMIT 0")
	want(t, "nested", hits(200, desc("nested", "parent", "files", "nested/x")), "OK 0")
	want(t, "nested, another value", hits(1, desc("nested", "parent", "files", "nested/y")), "OVER_LIMIT 0")
	want(t, "top/* then nested/*", hits(300, desc("files", "top/1", "files", "nested/1")), "OK 0")
	want(t, "top/* then nested/*, other values", hits(1, desc("files", "top/2", "files", "nested/2")), "OVER_LIMIT 0")
	want(t, "file test1: its own 50", hits(50, desc("file", "test1")), "OK 0")
	want(t, "file test2: test* shares 100", hits(100, desc("file", "test2")), "OK 0")
	want(t, "file test3", hits(1, desc("file", "test3")), "OVER_LIMIT 0")
	want(t, "user/1 res/1 read", hits(150, desc("user", "user/1", "resource", "res/1", "action", "read")), "OK 0")
	want(t, "user/2 res/2 read shares it", hits(1, desc("user", "user/2", "resource", "res/2", "action", "read")), "OVER_LIMIT 0")
	want(t, "user/2 res/2 write does not", hits(1, desc("user", "user/2", "resource", "res/2", "action", "write")), "OK 149")
	want(t, "path/* shared, file/* not", hits(120, desc("path", "path/1", "file", "file/1", "type", "t")), "OK 0")
	want(t, "another file/ value", hits(1, desc("path", "path/2", "file", "file/2", "type", "t")), "OK 119")
}

// TestObserve: each limited descriptor's decision reaches Observe under
// its rule's place in the configuration, or with detailed_metric under
// the request's values.
func TestObserve(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	srv := newServer(t, newClock().limiter(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})), "testdata/reference", envoyrls.Options{Observe: func(d redlimit.Decision) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprint(d.Policy, " ", d.Outcome))
	}})
	c := serve(t, srv)
	ask(t, c, "example8", desc("key1", "unspecified"))
	ask(t, c, "example8", desc("key1", "value1"))
	ask(t, c, "messaging", desc("to_number", "2061111111"))
	ask(t, c, "edge_proxy_per_ip", desc("remote_address", "50.0.0.5"))
	ask(t, c, "internal", desc("ldap", "x")) // unlimited: not a decision
	mu.Lock()
	defer mu.Unlock()
	want(t, "observed", strings.Join(seen, ", "), "example8.key1_unspecified allowed, example8.key1_value1 allowed, messaging.to_number allowed, edge_proxy_per_ip.remote_address_50.0.0.5 denied")
}

// statusText writes an answer as "OVERALL [code rpu/UNIT:name rem]...".
func statusText(r *rlsv3.RateLimitResponse) string {
	s := r.GetOverallCode().String()
	for _, st := range r.GetStatuses() {
		s += " [" + st.GetCode().String()
		if l := st.GetCurrentLimit(); l != nil {
			s += fmt.Sprintf(" %d/%s:%s", l.GetRequestsPerUnit(), l.GetUnit(), l.GetName())
		}
		s += fmt.Sprintf(" %d]", st.GetLimitRemaining())
	}
	return s
}

// TestQuotaMode: descriptors in quota_mode deny the request only when
// every one of them is over its limit, as the reference server decides
// (its examples/ratelimit/config/example.yaml and
// integration-test/scripts/quota.sh); each over-limit status says so.
func TestQuotaMode(t *testing.T) {
	t.Parallel()
	const doc = `
domain: rl
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
`
	c := serve(t, yamlServer(t, newClock().limiter(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})), doc, envoyrls.Options{}))
	both := []*ratelimitv3.RateLimitDescriptor{desc("service", "service_1"), desc("service", "service_2")}
	want(t, "first", statusText(ask(t, c, "rl", both...)), "OK [OK 1/MINUTE: 0] [OK 2/MINUTE: 1]")
	want(t, "second: service_2 has quota left", statusText(ask(t, c, "rl", both...)), "OK [OVER_LIMIT 1/MINUTE: 0] [OK 2/MINUTE: 0]")
	want(t, "third: both over", statusText(ask(t, c, "rl", both...)), "OVER_LIMIT [OVER_LIMIT 1/MINUTE: 0] [OVER_LIMIT 2/MINUTE: 0]")
	// The one descriptor in quota mode is over: the request is (the
	// user's charge refunded).
	want(t, "with a user", statusText(ask(t, c, "rl", desc("service", "service_1"), desc("user", "u"))), "OVER_LIMIT [OVER_LIMIT 1/MINUTE: 0] [OK 10/MINUTE: 10]")
	// A descriptor not in quota mode denies alone.
	want(t, "service_2 and a user", statusText(ask(t, c, "rl", desc("service", "service_2"), desc("user", "u"))), "OVER_LIMIT [OVER_LIMIT 2/MINUTE: 0] [OK 10/MINUTE: 10]")
}

// TestOverride: a request's limit override applies whatever the
// configuration says of the descriptor, unlimited included, under no
// name, as the reference server applies it (its test/config
// TestConfigLimitOverride, basic_config.yaml's key6); a domain the
// configuration does not have limits nothing.
func TestOverride(t *testing.T) {
	t.Parallel()
	c := serve(t, newServer(t, newClock().limiter(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})), "testdata/reference", envoyrls.Options{}))
	over := func(d *ratelimitv3.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit) *ratelimitv3.RateLimitDescriptor {
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		return d
	}
	want(t, "key6 unlimited, overridden", statusText(ask(t, c, "test-domain", over(desc("key6", "x"), 1, typev3.RateLimitUnit_MINUTE))), "OK [OK 1/MINUTE: 0]")
	want(t, "key6 again", statusText(ask(t, c, "test-domain", over(desc("key6", "x"), 1, typev3.RateLimitUnit_MINUTE))), "OVER_LIMIT [OVER_LIMIT 1/MINUTE: 0]")
	want(t, "key4 named, overridden", statusText(ask(t, c, "test-domain", over(desc("key4", "x"), 10, typev3.RateLimitUnit_DAY))), "OK [OK 10/DAY: 9]")
	want(t, "unknown domain", statusText(ask(t, c, "foo_domain", over(desc("key4", "x"), 10, typev3.RateLimitUnit_DAY))), "OK [OK 0]")
}

// refServer serves doc with Options.Reference on clk (the Limiter's
// clock and the Server's), opts added.
func refServer(t *testing.T, clk *clock, doc string, opts envoyrls.Options) rlsv3.RateLimitServiceClient {
	t.Helper()
	opts.Reference, opts.Clock = true, clk.now
	return serve(t, yamlServer(t, clk.limiter(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})), doc, opts))
}

// withReset is statusText with each status's duration_until_reset.
func withReset(r *rlsv3.RateLimitResponse) string {
	s := statusText(r)
	for _, st := range r.GetStatuses() {
		s += fmt.Sprintf(" %v", st.GetDurationUntilReset().AsDuration())
	}
	return s
}

// TestReferenceWindows: with Options.Reference a limit counts in the
// reference server's windows, spans of the Unix epoch (a week from a
// Thursday), and duration_until_reset is the time to their end.
func TestReferenceWindows(t *testing.T) {
	t.Parallel()
	clk := newClock() // Tuesday 2026-03-10 12:00:00 UTC
	clk.add(50 * time.Second)
	c := refServer(t, clk, `
domain: d
descriptors:
  - key: m
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: w
    rate_limit: {unit: week, requests_per_unit: 5}
  - key: mo
    rate_limit: {unit: month, requests_per_unit: 5}
`, envoyrls.Options{})
	want(t, "12:00:50", withReset(ask(t, c, "d", desc("m", "a"))), "OK [OK 1/MINUTE: 0] 10s")
	want(t, "12:00:59", func() string { clk.add(9 * time.Second); return withReset(ask(t, c, "d", desc("m", "a"))) }(), "OVER_LIMIT [OVER_LIMIT 1/MINUTE: 0] 1s")
	clk.add(time.Second)
	want(t, "12:01:00, a new window", withReset(ask(t, c, "d", desc("m", "a"))), "OK [OK 1/MINUTE: 0] 1m0s")
	// The week of the epoch ends on Thursday 00:00 UTC; a month is 30
	// days from the epoch.
	thursday := time.Date(2026, 3, 12, 0, 0, 0, 0, time.UTC).Sub(clk.now())
	want(t, "week", withReset(ask(t, c, "d", desc("w", "a"))), fmt.Sprintf("OK [OK 5/WEEK: 4] %v", thursday))
	p := int64(30 * 24 * 3600)
	month := time.Duration(p-clk.now().Unix()%p) * time.Second
	want(t, "month", withReset(ask(t, c, "d", desc("mo", "a"))), fmt.Sprintf("OK [OK 5/MONTH: 4] %v", month))
}

// TestReferenceCounts: with Options.Reference denied hits count as the
// reference's INCRBY counts them: a charge above what is left leaves
// the descriptor over its limit until its window ends, reads included;
// hits above the limit answer OVER_LIMIT with nothing remaining; a limit
// of 0 denies hits but not a read.
func TestReferenceCounts(t *testing.T) {
	t.Parallel()
	clk := newClock()
	c := refServer(t, clk, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: two
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: zero
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: big
    rate_limit: {unit: hour, requests_per_unit: 4294967295}
`, envoyrls.Options{})
	hits := func(key string, n uint64) string {
		d := desc(key, "a")
		d.HitsAddend = wrapperspb.UInt64(n)
		return withReset(ask(t, c, "d", d))
	}
	want(t, "5 of 10", hits("k", 5), "OK [OK 10/MINUTE: 5] 1m0s")
	want(t, "10 more", hits("k", 10), "OVER_LIMIT [OVER_LIMIT 10/MINUTE: 0] 1m0s")
	want(t, "then 1: the 10 counted", hits("k", 1), "OVER_LIMIT [OVER_LIMIT 10/MINUTE: 0] 1m0s")
	want(t, "then a read", hits("k", 0), "OVER_LIMIT [OVER_LIMIT 10/MINUTE: 0] 1m0s")
	want(t, "2 of 2", hits("two", 2), "OK [OK 2/MINUTE: 0] 1m0s")
	want(t, "a read of a full window", hits("two", 0), "OK [OK 2/MINUTE: 0] 1m0s")
	want(t, "1 more", hits("two", 1), "OVER_LIMIT [OVER_LIMIT 2/MINUTE: 0] 1m0s")
	want(t, "a read of a window over", hits("two", 0), "OVER_LIMIT [OVER_LIMIT 2/MINUTE: 0] 1m0s")
	want(t, "a read of 0", hits("zero", 0), "OK [OK 0/MINUTE: 0] 1m0s")
	want(t, "1 of 0", hits("zero", 1), "OVER_LIMIT [OVER_LIMIT 0/MINUTE: 0] 1m0s")
	want(t, "far too many", hits("zero", 1<<40), "OVER_LIMIT [OVER_LIMIT 0/MINUTE: 0] 1m0s")
	want(t, "4294967295 of 4294967295", hits("big", 4294967295), "OK [OK 4294967295/HOUR: 0] 1h0m0s")
	want(t, "then 1", hits("big", 1), "OVER_LIMIT [OVER_LIMIT 4294967295/HOUR: 0] 1h0m0s")
}

// TestReferenceAnswers: with Options.Reference several descriptors are
// all charged (unless refunded: the reference's
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT), the fields added are the
// reference's (none unless named, then the descriptor with the fewest
// remaining), and errors are Unknown.
func TestReferenceAnswers(t *testing.T) {
	t.Parallel()
	const doc = `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 1}
`
	clk := newClock()
	clk.add(2 * time.Second)
	for _, charge := range []bool{true, false} {
		c := refServer(t, clk, doc, envoyrls.Options{ChargeDenied: charge})
		ask(t, c, "d", desc("route", "/"))
		r := ask(t, c, "d", desc("user", "u"), desc("route", "/"))
		want(t, fmt.Sprint("charged ", charge), statusText(r), map[bool]string{true: "OVER_LIMIT [OK 10/MINUTE: 9] [OVER_LIMIT 1/HOUR: 0]", false: "OVER_LIMIT [OK 10/MINUTE: 10] [OVER_LIMIT 1/HOUR: 0]"}[charge])
		if h := r.GetResponseHeadersToAdd(); len(h) != 0 {
			t.Errorf("fields %v without names", h)
		}
	}
	c := refServer(t, clk, doc, envoyrls.Options{HeaderNames: envoyrls.HeaderNames{Limit: "A-Ratelimit-Limit", Remaining: "A-Ratelimit-Remaining", Reset: "A-Ratelimit-Reset"}})
	fields := func(r *rlsv3.RateLimitResponse) string {
		var out []string
		for _, h := range r.GetResponseHeadersToAdd() {
			out = append(out, h.GetKey()+": "+h.GetValue())
		}
		return strings.Join(out, ", ")
	}
	want(t, "fields", fields(ask(t, c, "d", desc("user", "u"), desc("route", "/"))), "A-Ratelimit-Limit: 1, A-Ratelimit-Remaining: 0, A-Ratelimit-Reset: 3598")
	want(t, "fields, denied", fields(ask(t, c, "d", desc("user", "u"), desc("route", "/"))), "A-Ratelimit-Limit: 1, A-Ratelimit-Remaining: 0, A-Ratelimit-Reset: 3598")
	want(t, "fields, one", fields(ask(t, c, "d", desc("user", "v"))), "A-Ratelimit-Limit: 10, A-Ratelimit-Remaining: 9, A-Ratelimit-Reset: 58")
	for _, req := range []*rlsv3.RateLimitRequest{{Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("a", "b")}}, {Domain: "x"}} {
		if _, err := c.ShouldRateLimit(t.Context(), req); status.Code(err) != codes.Unknown {
			t.Errorf("%v: %v, want Unknown", req, err)
		}
	}
}

// TestDynamicMetadata: with Options.DynamicMetadata the answer carries
// the reference server's dynamic metadata: the request, and the metadata
// of the rules of the descriptors that passed, the first one's name
// winning (its integration-test/scripts/multiservice-tokenquota.sh:
// Envoy routes to the service with quota left).
func TestDynamicMetadata(t *testing.T) {
	t.Parallel()
	const doc = `
domain: rl
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      service_with_quota:
        name: "service_1"
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata:
      service_with_quota:
        name: "service_2"
`
	for _, ref := range []bool{false, true} {
		clk := newClock()
		opts := envoyrls.Options{DynamicMetadata: true}
		var c rlsv3.RateLimitServiceClient
		if ref {
			c = refServer(t, clk, doc, opts)
		} else {
			c = serve(t, yamlServer(t, clk.limiter(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})), doc, opts))
		}
		read := func(value string) *ratelimitv3.RateLimitDescriptor {
			d := desc("service", value)
			d.HitsAddend = wrapperspb.UInt64(0)
			return d
		}
		name := func() string {
			r := ask(t, c, "rl", read("service_1"), read("service_2"))
			md := r.GetDynamicMetadata()
			if md.GetFields()["domain"].GetStringValue() != "rl" || len(md.GetFields()["descriptors"].GetListValue().GetValues()) != 2 {
				t.Errorf("metadata %v", md)
			}
			return r.GetOverallCode().String() + " " + md.GetFields()["metadata"].GetStructValue().GetFields()["service_with_quota"].GetStructValue().GetFields()["name"].GetStringValue()
		}
		want(t, fmt.Sprint("reference ", ref, ": both have quota"), name(), "OK service_1")
		ask(t, c, "rl", desc("service", "service_1"))
		want(t, fmt.Sprint("reference ", ref, ": service_1 spent"), name(), "OK service_1")
		// A charge past the limit: the reference counts it, so service_1
		// is over; redlimit's engine denies it and counts nothing, so a
		// read still passes (docs/envoy.md, "A denial counts nothing").
		ask(t, c, "rl", desc("service", "service_1"))
		want(t, fmt.Sprint("reference ", ref, ": service_1 charged past its limit"), name(), map[bool]string{false: "OK service_1", true: "OK service_2"}[ref])
	}
}

// TestGlobalQuotaMode: Options.QuotaMode (QUOTA_MODE) puts every
// descriptor in quota mode, as the reference's TestServiceGlobalQuotaMode.
func TestGlobalQuotaMode(t *testing.T) {
	t.Parallel()
	c := serve(t, yamlServer(t, newClock().limiter(redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})), `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5}
`, envoyrls.Options{QuotaMode: true}))
	ask(t, c, "d", desc("a", "x"))
	want(t, "a over, b not", statusText(ask(t, c, "d", desc("a", "x"), desc("b", "x"))), "OK [OVER_LIMIT 1/MINUTE: 0] [OK 5/MINUTE: 4]")
	want(t, "a over alone", statusText(ask(t, c, "d", desc("a", "x"))), "OVER_LIMIT [OVER_LIMIT 1/MINUTE: 0]")
}
