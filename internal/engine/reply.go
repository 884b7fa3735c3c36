package engine

import (
	"errors"
	"fmt"
	"time"
)

// The replies of the scripts, read here and nowhere else.
//
// A decision script (lua/decide.lua) of several limits replies with 1 if
// every limit allowed, else 0, then the decision's clock in µs (a
// reservation's settlement sends it back), then replyWidth integers per
// limit, in the order of its keys:
//
//	allowed (0 or 1), remaining, retry_after, reset_after, delay, next, mark, epoch
//
// where a limit that takes up to its cost (decision.upTo) says, when it
// allows, 1 plus what it took (at least 2) in place of 1; durations in
// microseconds (see Result for what each means; a remaining below 0, a
// debt, reads as 0); mark and epoch are what a settlement of the decision
// sends back to the algorithm (lua/prelude.lua, lua/meter.lua). The top
// allowed is 1 plus the events a prefetch took beyond the cost.
//
// A decision of one limit, the common case, replies with fewer values,
// since every value costs the script time:
//
//	allowed, remaining, reset_after, next[, retry_after[, delay, mark, epoch, clock]]
//
// allowed being the limit's (or the prefetch's: the two never meet), and
// the bracketed values 0 when left out.
//
// A batch script (lua/batch.lua) replies with each call's reply in turn,
// each after its length; or after -len, the error Redis gave that call,
// len bytes (at most maxBatchError) packed six to an integer, big-endian,
// the last holding the rest.
const replyWidth = 8

// maxBatchError is the longest error message the batch script returns.
const maxBatchError = 240

// errMalformed is the error of a reply that is not laid out as above.
var errMalformed = errors.New("redlimit: a script's reply is malformed")

// readReply stores in results (one per limit) what reply, a decision's,
// says of each limit, and in marks each limit's mark; it returns the
// decision's clock in µs and the events a prefetch took beyond the cost.
// A limit's cost (costs[i]) above its capacity was sent as 0, to report
// the state: it is never allowed, RetryAfter InfDuration.
func readReply(reply []int64, limits []Limit, infos []*limitInfo, costs []int, upTo uint32, results []Result, marks, epochs []int64) (int64, int, error) {
	if len(limits) == 1 {
		if len(reply) != 4 && len(reply) != 5 && len(reply) != 9 {
			return 0, 0, fmt.Errorf("%w: %d values for one limit, want 4, 5 or 9", errMalformed, len(reply))
		}
		var r [9]int64
		copy(r[:], reply)
		got := readLimit(r[0], r[1], r[4], r[2], r[5], r[3], limits, infos, costs, upTo, results, 0)
		marks[0], epochs[0] = r[6], r[7]
		return r[8], got, nil
	}
	if want := 2 + replyWidth*len(limits); len(reply) != want {
		return 0, 0, fmt.Errorf("%w: %d values for %d limits, want %d", errMalformed, len(reply), len(limits), want)
	}
	for i := range limits {
		r := reply[2+replyWidth*i:]
		readLimit(r[0], r[1], r[2], r[3], r[4], r[5], limits, infos, costs, upTo, results, i)
		marks[i], epochs[i] = r[6], r[7]
	}
	return reply[1], int(max(0, reply[0]-1)), nil
}

// readLimit stores limit i's result from what the reply says of it, and
// its cost if it took up to it; it returns what else allowed says: the
// events a prefetch took beyond the cost.
func readLimit(allowed, remaining, retry, reset, delay, next int64, limits []Limit, infos []*limitInfo, costs []int, upTo uint32, results []Result, i int) int {
	results[i] = Result{
		Limit:      limits[i],
		Allowed:    allowed >= 1,
		Remaining:  int(max(0, remaining)),
		RetryAfter: us(retry),
		ResetAfter: us(reset),
		Delay:      us(delay),
		NextAfter:  us(next),
	}
	if upTo&(1<<i) != 0 { // took up to its cost: the reply says how many
		if allowed >= 2 {
			costs[i] = int(allowed - 1)
		}
		return 0
	}
	if costs[i] > infos[i].capacity {
		results[i].Allowed, results[i].RetryAfter = false, InfDuration
	}
	return int(max(0, allowed-1))
}

// nextReply takes the reply of one call off the front of a batch script's
// reply: that call's reply, or the error Redis gave it; and returns the
// rest.
func nextReply(batch []int64) (reply, rest []int64, err error) {
	if len(batch) == 0 {
		return nil, nil, errMalformed
	}
	status, batch := batch[0], batch[1:]
	if status >= 1 {
		if int64(len(batch)) < status {
			return nil, nil, errMalformed
		}
		return batch[:status:status], batch[status:], nil
	}
	size := int(-status)
	words := (size + 5) / 6
	if size > maxBatchError || len(batch) < words {
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
