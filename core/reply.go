package core

import (
	"errors"
	"fmt"
	"time"
)

// The replies of the scripts, read here and nowhere else.
//
// A decision script (lua/decide.lua) replies with 1 if every limit allowed,
// else 0, then the decision's clock in µs (a reservation's settlement sends
// it back), then replyWidth integers per limit, in the order of its keys:
//
//	allowed (0 or 1), remaining, retry_after, reset_after, delay, next, mark
//
// where a limit that takes up to its cost (decision.upTo) says, when it
// allows, 1 plus what it took (at least 2) in place of 1; durations in microseconds (see Result for what each means; a remaining
// below 0, a debt, reads as 0); mark is what a settlement of the decision
// sends back to the algorithm (lua/prelude.lua). A batch
// script (lua/batch.lua) replies with each decision's reply in turn, each
// after a status: 1, then the decision's reply; or -len, then the error
// Redis gave that decision, len bytes (at most maxBatchError) packed six to
// an integer, big-endian, the last holding the rest.
const replyWidth = 7

// maxBatchError is the longest error message the batch script returns.
const maxBatchError = 240

// errMalformed is the error of a reply that is not laid out as above.
var errMalformed = errors.New("redlimit: a script's reply is malformed")

// replyLen is the length of a decision's reply for limits limits.
func replyLen(limits int) int { return 2 + replyWidth*limits }

// readReply stores in results (one per limit) what reply, a decision's,
// says of each limit, and in marks each limit's mark; it returns the
// decision's clock in µs and the events a prefetch took beyond the cost.
// A limit's cost (costs[i]) above its capacity was sent as 0, to report
// the state: it is never allowed, RetryAfter InfDuration.
func readReply(reply []int64, limits []Limit, infos []*limitInfo, costs []int, upTo uint32, results []Result, marks []int64) (int64, int, error) {
	if len(reply) != replyLen(len(limits)) {
		return 0, 0, fmt.Errorf("%w: %d values for %d limits, want %d", errMalformed, len(reply), len(limits), replyLen(len(limits)))
	}
	for i, l := range limits {
		r := reply[2+replyWidth*i:]
		results[i] = Result{
			Limit:      l,
			Allowed:    r[0] >= 1,
			Remaining:  int(max(0, r[1])),
			RetryAfter: us(r[2]),
			ResetAfter: us(r[3]),
			Delay:      us(r[4]),
			NextAfter:  us(r[5]),
		}
		marks[i] = r[6]
		if upTo&(1<<i) != 0 { // took up to its cost: the reply says how many
			if r[0] >= 2 {
				costs[i] = int(r[0] - 1)
			}
			continue
		}
		if costs[i] > infos[i].capacity {
			results[i].Allowed, results[i].RetryAfter = false, InfDuration
		}
	}
	return reply[1], int(max(0, reply[0]-1)), nil
}

// nextReply takes the reply of one call, n values long, off the front of a
// batch script's reply: that call's reply, or the error Redis gave it; and
// returns the rest.
func nextReply(batch []int64, n int) (reply, rest []int64, err error) {
	if len(batch) == 0 {
		return nil, nil, errMalformed
	}
	status, batch := batch[0], batch[1:]
	if status == 1 {
		if len(batch) < n {
			return nil, nil, errMalformed
		}
		return batch[:n:n], batch[n:], nil
	}
	size := int(-status)
	words := (size + 5) / 6
	if size < 0 || size > maxBatchError || len(batch) < words {
		return nil, nil, errMalformed
	}
	msg := make([]byte, 0, size)
	for i, w := range batch[:words] {
		for b := min(6, size-6*i) - 1; b >= 0; b-- {
			msg = append(msg, byte(w>>(8*b)))
		}
	}
	return nil, batch[words:], redisError(msg)
}

// redisError is an error Redis gave one decision of a batch script. Like
// go-redis's own, it is a redis.Error, so redis.HasErrorPrefix reads it.
type redisError string

func (e redisError) Error() string { return string(e) }

// RedisError marks e as an error reply of the server.
func (redisError) RedisError() {}

// us converts the scripts' microseconds to a Duration.
func us(n int64) time.Duration { return time.Duration(n) * time.Microsecond }

// micros converts a Duration to the scripts' microseconds.
func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }
