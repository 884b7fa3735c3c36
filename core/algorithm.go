package core

import (
	"crypto/sha1"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/redlimit/redlimit/lua"
)

// script is one Lua script, run with EVALSHA, or EVAL when the server does
// not have it yet.
type script struct {
	src, sha string
	// The two boxed once, so that no call allocates to pass them.
	srcArg, shaArg any
}

func newScript(src string) *script {
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	return &script{src: src, sha: sha, srcArg: src, shaArg: sha}
}

// maxArgs is the most ARGV an algorithm's body reads, from ARGV[3] on.
const maxArgs = 4

// descriptor is everything the Limiter knows of one algorithm (or variant:
// the stepped token bucket keeps other state than the continuous one). Its
// script is lua/<body>.lua after the prelude.
type descriptor struct {
	script *script
	// suffix follows "}:" in the key; variants whose state means different
	// things never share a key.
	suffix string
	// window: the allowance is Rate per Period, and Burst must equal Rate.
	window bool
	// args returns the ARGV the body reads from ARGV[3] on (the prelude's
	// ARGV[1] and ARGV[2] are the clock and the cost), in argv[:n].
	args func(l Limit) (argv [maxArgs]int64, n int)
	// span returns the largest integer the script will hold for l, beyond
	// the clock, so Validate can refuse limits Lua cannot count exactly. It
	// is a float64 so that absurd limits cannot overflow the check itself.
	span func(l Limit) float64
}

func newDescriptor(body string, d descriptor) *descriptor {
	d.script = newScript(lua.Decision(body))
	if d.suffix == "" {
		d.suffix = body
	}
	return &d
}

// algorithms holds the descriptor of every algorithm, by name.
var algorithms = map[Algorithm]*descriptor{
	GCRA: newDescriptor("gcra", descriptor{
		args: func(l Limit) ([maxArgs]int64, int) {
			return [maxArgs]int64{gcraInterval(l), int64(l.Capacity())}, 2
		},
		span: func(l Limit) float64 { return float64(l.Capacity()) * float64(gcraInterval(l)) },
	}),
	TokenBucket: newDescriptor("token_bucket", descriptor{args: bucketArgs, span: unitSpan}),
	LeakyBucket: newDescriptor("leaky_bucket", descriptor{
		args: func(l Limit) ([maxArgs]int64, int) {
			argv, n := bucketArgs(l)
			if l.Shape {
				argv[n] = micros(l.MaxDelay)
				n++
			}
			return argv, n
		},
		span: unitSpan,
	}),
	FixedWindow: newDescriptor("fixed_window", descriptor{window: true, args: windowArgs,
		span: func(l Limit) float64 { return float64(micros(l.Period)) }}),
	SlidingWindow: newDescriptor("sliding_window", descriptor{window: true,
		args: func(l Limit) ([maxArgs]int64, int) {
			return [maxArgs]int64{micros(l.Period), int64(l.Rate), int64(l.buckets())}, 3
		},
		span: func(l Limit) float64 { // rate times the sub-bucket size
			return float64(l.Rate) * float64(micros(l.Period)/int64(l.buckets()))
		}}),
	SlidingLog: newDescriptor("sliding_log", descriptor{window: true, args: windowArgs,
		span: func(l Limit) float64 { return float64(micros(l.Period)) }}),
}

// steppedTokenBucket is the TokenBucket with Stepped set.
var steppedTokenBucket = newDescriptor("token_bucket_stepped", descriptor{
	suffix: "token_bucket:stepped",
	args: func(l Limit) ([maxArgs]int64, int) {
		return [maxArgs]int64{int64(l.Rate), micros(l.Period), int64(l.Capacity())}, 3
	},
	span: unitSpan,
})

// descriptor returns the descriptor of l's algorithm and variant; l must be
// valid.
func (l Limit) descriptor() *descriptor {
	if l.Stepped {
		return steppedTokenBucket
	}
	return algorithms[l.algorithm()]
}

// gcraInterval is the time between events, in microseconds, rounded up.
func gcraInterval(l Limit) int64 {
	return (micros(l.Period) + int64(l.Rate) - 1) / int64(l.Rate)
}

// bucketArgs: the exact unit of the bucket algorithms. One event is `unit`
// and one microsecond refills or drains `drip`: period and rate divided by
// their greatest common divisor.
func bucketArgs(l Limit) ([maxArgs]int64, int) {
	p := micros(l.Period)
	g := gcd(p, int64(l.Rate))
	return [maxArgs]int64{p / g, int64(l.Rate) / g, int64(l.Capacity())}, 3
}

func windowArgs(l Limit) ([maxArgs]int64, int) {
	return [maxArgs]int64{micros(l.Period), int64(l.Rate)}, 2
}

// unitSpan bounds the bucket scripts' credit or level: burst events of
// period/gcd(period, rate) units each.
func unitSpan(l Limit) float64 {
	p := micros(l.Period)
	return float64(l.Capacity()) * float64(p/gcd(p, int64(l.Rate)))
}

// delScript deletes the keys it is given.
var delScript = newScript(lua.Del())

// algorithmNames lists the known algorithms for error messages.
func algorithmNames() string {
	names := make([]string, 0, len(algorithms))
	for a := range algorithms {
		names = append(names, string(a))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
