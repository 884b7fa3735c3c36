package engine

import (
	"fmt"
	"reflect"
	"time"
)

// What core's tests and benchmarks read of the engine (core's
// export_test.go); nothing else calls these.

// Settings the tests read.
const (
	MaxMembers             = maxMembers
	MinPeriod              = minPeriod
	DefaultBuckets         = defaultBuckets
	MaxKeyLen              = maxKeyLen
	BreakerMinFailures     = breakerMinFailures
	BreakerProbeInterval   = breakerProbeInterval
	DefaultBatchSize       = defaultBatchSize
	DefaultBreakerAfter    = defaultBreakerAfter
	DefaultDenyCacheMaxAge = defaultDenyCacheMaxAge
)

// Senders returns how many sender goroutines the Limiter runs now.
func (l *Limiter) Senders() int {
	n := 0
	l.carrier.eachLane(func(ln *lane) {
		ln.mu.Lock()
		n += ln.alive
		ln.mu.Unlock()
	})
	return n
}

// Queued returns how many decisions wait for a sender.
func (l *Limiter) Queued() int {
	n := 0
	l.carrier.eachLane(func(ln *lane) {
		ln.mu.Lock()
		n += len(ln.queue)
		ln.mu.Unlock()
	})
	return n
}

// Lanes returns how many lanes of Cluster or Ring nodes the Limiter keeps.
func (l *Limiter) Lanes() int {
	n := 0
	l.carrier.lanes.Range(func(any, any) bool { n++; return true })
	return n
}

// SetLinger changes how long the Limiter's idle senders wait before they
// stop, so tests of goroutine counts need not wait a second.
func (l *Limiter) SetLinger(d time.Duration) { l.carrier.linger.Store(int64(d)) }

// DenyCacheLen returns how many keys the deny cache holds.
func (l *Limiter) DenyCacheLen() int {
	if l.deny == nil {
		return 0
	}
	return l.deny.entries.Len()
}

// Held returns how many prefetched events the Limiter holds for key under
// limit (in scope ""), and whether it may still use them now.
func (l *Limiter) Held(key string, limit Limit) (int, bool) {
	info, err := infos.get(limit)
	if err != nil {
		return 0, false
	}
	v, ok := l.leases.Load(stateKey(l.prefix, "", key, info))
	if !ok {
		return 0, false
	}
	g := v.(*lease).g.Load()
	if g == nil {
		return 0, false
	}
	left := g.left.Load()
	return int(left), l.now().Before(g.deadline(left))
}

// Leases returns how many keys the Limiter keeps prefetch leases for.
func (l *Limiter) Leases() int {
	n := 0
	l.leases.Range(func(any, any) bool { n++; return true })
	return n
}

// Peers returns how many instances the Limiter counted sharing its keys
// (0: none heard yet).
func (l *Limiter) Peers() int { return int(l.peers.count.Load()) }

// SharePeers makes the Limiter count the instances that share its keys,
// as a FailLocal policy does.
func (l *Limiter) SharePeers() { l.peers.on.Store(true) }

// Script returns the decision script of l and the ARGV it takes for a cost
// of 1 on the server's clock, no reservation, for benchmarks of the
// scripts alone.
func Script(l Limit) (src, sha string, argv []any) {
	info, err := infos.get(l)
	if err != nil {
		panic(err)
	}
	return info.d.script.src, info.d.script.sha, info.appendArgs([]any{"", "", 0, 1}, time.Now())
}

// MixedScript returns the script that decides any mix of algorithms.
func MixedScript() (src, sha string) { return mixedScript.src, mixedScript.sha }

// IsBatchScript reports whether arg, an EVALSHA's or EVAL's first
// argument, is a batch script's SHA or source: every algorithm's, or one
// algorithm file's.
func IsBatchScript(arg any) bool {
	for _, s := range batchScripts {
		if arg == s.sha || arg == s.src {
			return true
		}
	}
	return false
}

// FilledResult returns a Result whose every field, and every field of its
// Limit, holds a value no other field holds, for tests of the conversions
// to core.Result: a conversion that leaves a field out shows as a zero.
func FilledResult() Result {
	var r Result
	n := 0
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		for i := range v.NumField() {
			f := v.Field(i)
			n++
			switch f.Kind() {
			case reflect.Struct:
				fill(f)
			case reflect.Bool:
				f.SetBool(true)
			case reflect.Int, reflect.Int64:
				f.SetInt(int64(n))
			case reflect.String:
				f.SetString(fmt.Sprint("s", n))
			default:
				panic(fmt.Sprintf("engine.FilledResult: field %s of kind %v", v.Type().Field(i).Name, f.Kind()))
			}
		}
	}
	fill(reflect.ValueOf(&r).Elem())
	return r
}

// SameFields reports, as an error, the fields of two structs of the same
// field names that differ, recursively; a field one of them lacks counts.
func SameFields(a, b any) error {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if va.NumField() != vb.NumField() {
		return fmt.Errorf("%v has %d fields, %v %d", va.Type(), va.NumField(), vb.Type(), vb.NumField())
	}
	for i := range va.NumField() {
		name := va.Type().Field(i).Name
		fa, fb := va.Field(i), vb.FieldByName(name)
		switch {
		case !fb.IsValid():
			return fmt.Errorf("%v has no field %s", vb.Type(), name)
		case fa.Kind() == reflect.Struct:
			if err := SameFields(fa.Interface(), fb.Interface()); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		case fmt.Sprint(fa.Interface()) != fmt.Sprint(fb.Interface()):
			return fmt.Errorf("%s: %v, want %v", name, fb.Interface(), fa.Interface())
		}
	}
	return nil
}
