package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// What the transport tells apart about errors: which say a server is
// failing (its breaker counts them), which are a call's own (the server
// answered), which mean a call never ran (it is sent again), and what a
// timeout names as its cause.

func newSentinels(timeout, unavailable error) sentinels {
	return sentinels{timeout: timeout, unavailable: unavailable,
		queueFull: fmt.Errorf("%w: too many decisions waiting for Redis (%w)", unavailable, errFull)}
}

// failingCodes are the error replies that say the server cannot run
// scripts now, whatever they ask: it loads its data (LOADING), runs a
// script past its time limit (BUSY), has lost its master (MASTERDOWN) or
// its replicas (NOREPLICAS), is out of memory (OOM) or cannot save
// (MISCONF), has no room for another client, or refuses the Limiter's user
// (NOAUTH, WRONGPASS, NOPERM). They count toward the breaker, as do errors
// that are not replies (timeouts, refused or broken connections).
var failingCodes = []string{"LOADING", "BUSY", "MASTERDOWN", "NOREPLICAS", "OOM", "MISCONF",
	"max number of clients", "NOAUTH", "WRONGPASS", "NOPERM"}

// requestError reports whether err is the server's answer to what one call
// asked rather than a sign that it is failing: an error reply other than
// failingCodes and a Cluster's refusals (unrun), such as WRONGTYPE on a key
// that holds another type, or an error the script raised about its
// arguments (the calendar windows' check). Such an error is the caller's
// alone; it must not open the breaker and fail every other key's
// calls with it.
func requestError(err error) bool {
	var reply redis.Error
	if err == nil || !errors.As(err, &reply) || unrun(err) {
		return false
	}
	for _, code := range failingCodes {
		if redis.HasErrorPrefix(err, code) {
			return false
		}
	}
	return true
}

// RequestError reports whether err is the server's answer to the call
// itself (WRONGTYPE, an argument the script refused): the call ran
// nothing, and would fail again.
func RequestError(err error) bool { return requestError(err) }

// topologyError reports whether err may mean that the slot map is stale: a
// node unreachable or slow, or refusing its slots.
func topologyError(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return !errors.Is(err, errFull) // a timeout, a network error
	}
	return unrun(err) || refused(err, "MASTERDOWN")
}

// telling reports whether err says more of a lane than that time ran out,
// or than the call itself was wrong: a lane's timeouts name it as their
// likely cause.
func telling(err error) bool {
	var ne net.Error
	return !ctxDeadline(err) && !errors.Is(err, context.Canceled) && !(errors.As(err, &ne) && ne.Timeout()) && !requestError(err)
}

func ctxDeadline(err error) bool { return errors.Is(err, context.DeadlineExceeded) }

// errFull marks the error of a call refused because its lane's queue was
// full (Config.ErrUnavailable wraps it too).
var errFull = errors.New("the queue is full")

// unsentError is the error of a call that was not sent: its caller's
// context had ended before. It unwraps to the context's error.
type unsentError struct{ error }

func (e unsentError) Unwrap() error { return e.error }

// MayHaveRun reports whether a call that failed with err may have run its
// script: any failure but those that say it was never sent (its context
// had ended, an open breaker, a full queue: Config.ErrUnavailable) or
// that Redis refused it without running it (RequestError).
func (t *Transport) MayHaveRun(err error) bool {
	var u unsentError
	return !errors.As(err, &u) && !errors.Is(err, t.errs.unavailable) && !requestError(err)
}

// timeoutError is the error of a call that outlived its timeout; cause is
// the last error its lane saw, if recent, or the client's last failed dial.
type timeoutError struct {
	d        time.Duration
	cause    error
	dial     bool  // cause is a failed dial: the client could not connect
	sentinel error // Config.ErrTimeout
}

func (e *timeoutError) Error() string {
	switch {
	case e.dial:
		return fmt.Sprintf("redlimit: could not reach Redis within %v: %v", e.d, e.cause)
	case e.cause != nil:
		return fmt.Sprintf("redlimit: no answer from Redis within %v (it last failed with: %v)", e.d, e.cause)
	}
	return fmt.Sprintf("redlimit: no answer from Redis within %v", e.d)
}

// Unwrap lets errors.Is find Config.ErrTimeout, context.DeadlineExceeded
// and the cause.
func (e *timeoutError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.sentinel, context.DeadlineExceeded, e.cause}
	}
	return []error{e.sentinel, context.DeadlineExceeded}
}

// IsTimeout reports whether err is a call's timeout (it wraps
// Config.ErrTimeout).
func IsTimeout(err error) bool {
	var t *timeoutError
	return errors.As(err, &t)
}

// dialWatch is a go-redis hook that remembers the last failed dial of a
// client's connections (a refused connection, a name that does not
// resolve), which go-redis retries and then hides behind the caller's
// deadline: a call that times out names it as the likely cause.
type dialWatch struct {
	last atomic.Pointer[dialFailure]
}

// dialFailure is a failed dial: its address, error and time.
type dialFailure struct {
	addr string
	err  error
	at   time.Time
}

func (w *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		switch {
		case err != nil && ctx.Err() == nil:
			w.last.Store(&dialFailure{addr, err, time.Now()})
		case err == nil && w.last.Load() != nil:
			w.last.Store(nil)
		}
		return conn, err
	}
}

func (w *dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (w *dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// failed returns the error of the last dial to addr ("": to any address)
// if it failed within causeMaxAge, else nil.
func (w *dialWatch) failed(addr string) error {
	d := w.last.Load()
	if d == nil || addr != "" && d.addr != addr || time.Since(d.at) > causeMaxAge {
		return nil
	}
	return d.err
}
