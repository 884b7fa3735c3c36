package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestRequestError: which errors are a call's own (the server answered;
// they never count toward the breaker) and which say Redis is failing.
func TestRequestError(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		err  error
		own  bool
		what string
	}{
		{redisError("WRONGTYPE Operation against a key holding the wrong kind of value"), true, "WRONGTYPE"},
		{redisError("user_script:35: redlimit: the Redis clock is outside the calendar windows the client sent"), true, "the calendar check"},
		{fmt.Errorf("redlimit: gcra decision: %w", redisError("ERR Error compiling script (new function): :80: WRONGTYPE")), true, "miniredis's WRONGTYPE, wrapped"},
		{redisError("ERR wrong number of arguments for 'evalsha' command"), true, "bad input"},
		{redisError("LOADING Redis is loading the dataset in memory"), false, "LOADING"},
		{redisError("BUSY Redis is busy running a script"), false, "BUSY"},
		{redisError("OOM command not allowed when used memory > 'maxmemory'"), false, "OOM"},
		{redisError("MISCONF Redis is configured to save RDB snapshots"), false, "MISCONF"},
		{redisError("MASTERDOWN Link with MASTER is down"), false, "MASTERDOWN"},
		{redisError("ERR max number of clients reached"), false, "max clients"},
		{redisError("NOPERM this user has no permissions to run the 'evalsha' command"), false, "NOPERM"},
		{redisError("MOVED 3999 127.0.0.1:6381"), false, "a Cluster's refusal"},
		{&net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, false, "connection refused"},
		{context.DeadlineExceeded, false, "a timeout"},
		{errors.New("EOF"), false, "a broken connection"},
		{redis.ErrClosed, false, "a closed client"},
		{nil, false, "no error"},
	} {
		if got := requestError(tt.err); got != tt.own {
			t.Errorf("%s: requestError(%v) = %v, want %v", tt.what, tt.err, got, tt.own)
		}
	}
}

// redisError is an error reply, as go-redis gives one: a redis.Error.
type redisError string

func (e redisError) Error() string { return string(e) }
func (redisError) RedisError()     {}
