package core

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redlimit/redlimit/internal/wire"
)

// maxArgs is the most ARGV an algorithm reads.
const maxArgs = 4

// knob is a Limit field that only some algorithms read.
type knob uint8

const (
	knobBuckets  knob = 1 << iota // Buckets
	knobStepped                   // Stepped
	knobShape                     // Shape, and MaxDelay with it
	knobMaxDelay                  // MaxDelay
	knobCalendar                  // Calendar
	knobPrefetch                  // Prefetch
	knobMaxDebt                   // MaxDebt
)

// descriptor is everything the Limiter knows of one algorithm, or of one
// variant of it whose script entry or state differs (the stepped token
// bucket keeps other state than the continuous one; the shaping leaky
// bucket reads one more argument). It is the one place to read, beside the
// algorithm's lua/<file>.lua, and adding an algorithm means adding one
// entry to algorithms (or to a variant's parent) and one line to the
// shared behaviour suite (suiteAlgorithms in suite_test.go).
type descriptor struct {
	// name is the algorithm's entry in the scripts' table:
	// algorithms.<name> in lua/src/<file>.lua.
	name, file string
	// script decides limits of this algorithm alone and settles their
	// reservations (lua/scripts/<file>.lua); decisions that mix algorithms
	// run wire.All.
	script *wire.Script
	// suffix follows "}:" in the key, before the period; variants whose
	// state means different things never share a key.
	suffix string
	// window: the allowance is Rate per Period, and Burst must equal Rate.
	window bool
	// knobs are the Limit fields beyond Rate, Period and Burst that the
	// algorithm reads; check validates their values.
	knobs knob
	check func(l Limit) error
	// args returns the ARGV the algorithm reads (after its cost and name),
	// in argv[:n]; n is the same for every limit.
	args func(l Limit) (argv [maxArgs]int64, n int)
	// span returns the largest integer the script will hold for l, beyond
	// the clock, so Validate can refuse limits Lua cannot count exactly. It
	// is a float64 so that absurd limits cannot overflow the check itself.
	span func(l Limit) float64
	// bounds: the script reads four calendar boundaries after args, which
	// each call computes (calendarBounds).
	bounds bool
	// holds: the limit holds slots that a reservation's settlement frees,
	// so only Reserve takes it.
	holds bool
	// members: each event it admits is a member of a sorted set (a log
	// entry, a slot), which one call adds or removes one by one: a
	// decision may take at most maxMembers of them in all.
	members bool
	// meter: the limit refills continuously, so prefetched events may be
	// admitted only while they would still be counted (prefetch.go); a
	// prefetching algorithm without it is a window, whose prefetched
	// events last until the window ends.
	meter bool
}

// algorithms holds the descriptor of every algorithm, by name. Variants
// are picked by Limit.descriptor.
var algorithms = map[Algorithm]*descriptor{
	GCRA:        {file: "gcra", knobs: knobPrefetch | knobMaxDebt, meter: true, args: bucketArgs, span: unitSpan},
	TokenBucket: {file: "token_bucket", knobs: knobStepped | knobPrefetch | knobMaxDebt, meter: true, args: bucketArgs, span: unitSpan},
	LeakyBucket: {file: "leaky_bucket", knobs: knobShape | knobMaxDebt, args: bucketArgs, span: unitSpan},
	FixedWindow: {file: "fixed_window", window: true, knobs: knobCalendar | knobPrefetch, args: windowArgs,
		span: func(l Limit) float64 { return float64(micros(l.Period)) }},
	SlidingWindow: {file: "sliding_window", window: true, knobs: knobBuckets,
		check: func(l Limit) error {
			switch {
			case l.Buckets < 0 || l.Buckets > maxBuckets:
				return fmt.Errorf("buckets %d must be between 1 and %d (0 means %d)", l.Buckets, maxBuckets, defaultBuckets)
			case micros(l.Period)%int64(l.buckets()) != 0:
				return fmt.Errorf("period %v does not divide into %d buckets of whole microseconds", l.Period, l.buckets())
			}
			return nil
		},
		args: func(l Limit) ([maxArgs]int64, int) {
			return [maxArgs]int64{micros(l.Period), int64(l.Rate), int64(l.buckets())}, 3
		},
		span: func(l Limit) float64 { // the weighted count (a debt fills the window to three times the rate), or the period
			return max(3*float64(l.Rate)*float64(micros(l.Period)/int64(l.buckets())), float64(micros(l.Period)))
		}},
	SlidingLog: {file: "sliding_log", window: true, members: true, args: windowArgs,
		span: func(l Limit) float64 { return float64(micros(l.Period)) }},
	Concurrency: {file: "concurrency", window: true, holds: true, members: true,
		args: func(l Limit) ([maxArgs]int64, int) {
			return [maxArgs]int64{micros(l.Period), int64(l.Rate)}, 2
		},
		span: func(l Limit) float64 { return float64(micros(l.Period)) }},
}

// steppedTokenBucket is the TokenBucket with Stepped set: other state.
var steppedTokenBucket = &descriptor{name: "token_bucket_stepped", file: "token_bucket_stepped",
	suffix: "token_bucket:stepped", knobs: knobStepped | knobMaxDebt,
	args: func(l Limit) ([maxArgs]int64, int) {
		return [maxArgs]int64{int64(l.Rate), micros(l.Period), int64(l.Capacity())}, 3
	},
	span: unitSpan,
}

// shapingLeakyBucket is the LeakyBucket with Shape set: the same state,
// one more argument.
var shapingLeakyBucket = &descriptor{name: "leaky_bucket_shape", file: "leaky_bucket",
	suffix: string(LeakyBucket), knobs: knobShape | knobMaxDelay | knobMaxDebt,
	check: func(l Limit) error {
		if l.MaxDelay < 0 || l.MaxDelay%time.Microsecond != 0 {
			return fmt.Errorf("max_delay %v must be positive whole microseconds (0 means none)", l.MaxDelay)
		}
		return nil
	},
	args: func(l Limit) ([maxArgs]int64, int) {
		argv, n := bucketArgs(l)
		argv[n] = micros(l.MaxDelay)
		return argv, n + 1
	},
	span: unitSpan,
}

// calendarWindow is the FixedWindow with Calendar set: its windows follow
// the calendar, the boundaries sent with each call.
var calendarWindow = &descriptor{name: "fixed_window_calendar", file: "fixed_window",
	suffix: "fixed_window:calendar", window: true, knobs: knobCalendar | knobPrefetch, bounds: true,
	check: func(l Limit) error {
		if l.Period != day && l.Period != week && l.Period != month {
			return fmt.Errorf("a calendar window is a day, a week or a month (\"d\", \"w\", \"month\"), not %v", formatPeriod(l.Period, periodUnits))
		}
		_, err := zone(l.Calendar)
		return err
	},
	args: func(l Limit) ([maxArgs]int64, int) { return [maxArgs]int64{int64(l.Rate)}, 1 },
	span: func(l Limit) float64 { return float64(micros(l.Period)) },
}

func init() {
	for name, d := range algorithms {
		d.name = string(name)
	}
	for _, d := range append(slices.Collect(maps.Values(algorithms)), steppedTokenBucket, shapingLeakyBucket, calendarWindow) {
		if d.suffix == "" {
			d.suffix = d.name
		}
		d.script = wire.ScriptOf(d.file)
	}
}

// descriptor returns the descriptor of l's algorithm and variant, or nil
// for an unknown algorithm.
func (l Limit) descriptor() *descriptor {
	switch {
	case l.Stepped && l.algorithm() == TokenBucket:
		return steppedTokenBucket
	case l.Shape && l.algorithm() == LeakyBucket:
		return shapingLeakyBucket
	case l.Calendar != "" && l.algorithm() == FixedWindow:
		return calendarWindow
	}
	return algorithms[l.algorithm()]
}

// knobs returns the knobs l sets.
func (l Limit) knobs() knob {
	var k knob
	if l.Buckets != 0 {
		k |= knobBuckets
	}
	if l.Stepped {
		k |= knobStepped
	}
	if l.Shape {
		k |= knobShape
	}
	if l.MaxDelay != 0 {
		k |= knobMaxDelay
	}
	if l.Calendar != "" {
		k |= knobCalendar
	}
	if l.Prefetch != 0 {
		k |= knobPrefetch
	}
	if l.MaxDebt != 0 {
		k |= knobMaxDebt
	}
	return k
}

// knobNames names each knob as ParseLimit spells it.
var knobNames = map[knob]string{knobBuckets: "buckets", knobStepped: "stepped",
	knobShape: "shape", knobMaxDelay: "max_delay", knobCalendar: "calendar", knobPrefetch: "prefetch",
	knobMaxDebt: "max_debt"}

// checkKnobs reports a knob that l sets but its algorithm does not read.
func (l Limit) checkKnobs(d *descriptor) error {
	extra := l.knobs() &^ d.knobs
	if extra == 0 {
		return nil
	}
	for k := knobBuckets; k <= knobMaxDebt; k <<= 1 {
		if extra&k == 0 {
			continue
		}
		switch {
		case k == knobMaxDelay:
			return fmt.Errorf("max_delay needs shape (a %s that queues)", LeakyBucket)
		case k == knobMaxDebt:
			return fmt.Errorf("max_debt is a gcra, token_bucket or leaky_bucket setting: a %s's debt ends with its window", l.algorithm())
		case k == knobPrefetch && (l.Stepped || l.Shape):
			return fmt.Errorf("prefetch does not go with stepped or shape: their events may not be admitted later than they are counted")
		}
		var readers []string
		for name, other := range algorithms {
			if other.knobs&k != 0 {
				readers = append(readers, string(name))
			}
		}
		slices.Sort(readers)
		return fmt.Errorf("%s is a %s setting, not %s", knobNames[k], strings.Join(readers, " or "), l.algorithm())
	}
	return nil
}

// gcraTAT is a GCRA theoretical arrival time: at + frac/drip µs, 0 <=
// frac < drip (lua/gcra.lua's T and Q).
type gcraTAT struct{ at, frac int64 }

// gcra is lua/gcra.lua's decision in Go, for the in-process fallback
// (local.go): it decides cost events at now (µs) for a key whose arrival
// time is tat (the zero gcraTAT, or any instant up to now, when the burst
// is full), one event unit and one µs drip (bucketArgs), burst of them at
// once. It returns the result, with durations in µs as the script's, and
// the arrival time to store if allowed.
func gcra(tat gcraTAT, now int64, cost int, unit, drip int64, burst int) (allowed bool, remaining int, retry, reset, next int64, newTAT gcraTAT) {
	full := int64(burst) * unit
	var backlog int64 // units ahead of now
	if tat.at >= now {
		backlog = (tat.at-now)*drip + tat.frac
	}
	left := func(b int64) int { return int(max(0, floorDiv(full-b, unit))) }
	nextAt := func(b int64, l int) int64 { // µs until one more event fits
		if l >= burst {
			return 0
		}
		return ceilDiv(b-full+int64(l+1)*unit, drip)
	}
	need := backlog + int64(cost)*unit
	if need > full {
		l := left(backlog)
		return false, l, ceilDiv(need-full, drip), ceilDiv(backlog, drip), nextAt(backlog, l), tat
	}
	l := left(need)
	return true, l, 0, ceilDiv(need, drip), nextAt(need, l), gcraTAT{now + need/drip, need % drip}
}

// floorDiv and ceilDiv divide a by b > 0, rounding down and up, as Lua's
// math.floor and math.ceil do after a division.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

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
