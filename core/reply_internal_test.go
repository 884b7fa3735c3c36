package core

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// packError lays out an error as lua/batch.lua does: -len, then the bytes
// six to an integer, big-endian.
func packError(msg string) []int64 {
	out := []int64{-int64(len(msg))}
	for i := 0; i < len(msg); i += 6 {
		var v int64
		for _, b := range []byte(msg[i:min(i+6, len(msg))]) {
			v = v<<8 | int64(b)
		}
		out = append(out, v)
	}
	return out
}

// TestNextReply: a batch script's reply splits into each decision's
// reply or error, whatever the length of the message; a reply too short
// for what it announces is an error for the rest, never a panic.
func TestNextReply(t *testing.T) {
	t.Parallel()
	one := []int64{1, 1, 77, 1, 9, 0, 5, 0, 0, 12}                     // one limit, allowed, at µs 77
	two := []int64{1, 0, 77, 1, 4, 0, 7, 0, 0, 5, 0, 0, 3, 3, 0, 3, 0} // two limits, the second denies
	for _, msg := range []string{"", "W", "WRONGT", "WRONGTY", strings.Repeat("é", maxBatchError/2)} {
		reply := slices.Concat(one, packError(msg), two)
		mine, rest, err := nextReply(reply, replyLen(1))
		if err != nil || !slices.Equal(mine, one[1:]) {
			t.Fatalf("first: %v, %v", mine, err)
		}
		mine, rest, err = nextReply(rest, replyLen(1))
		if !redis.HasErrorPrefix(err, msg) || err.Error() != msg || mine != nil {
			t.Fatalf("message of %d bytes: %q, %v", len(msg), err, mine)
		}
		mine, rest, err = nextReply(rest, replyLen(2))
		if err != nil || !slices.Equal(mine, two[1:]) || len(rest) != 0 {
			t.Fatalf("after a message of %d bytes: %v, %v, rest %v", len(msg), mine, err, rest)
		}
	}
	for name, reply := range map[string][]int64{
		"empty":          nil,
		"short reply":    one[:5],
		"short message":  packError("WRONGTYPE")[:2],
		"long message":   packError(strings.Repeat("x", maxBatchError+1)),
		"unknown status": {2, 1, 77, 1, 9, 0, 5, 0, 0, 0},
	} {
		if mine, rest, err := nextReply(reply, replyLen(1)); !errors.Is(err, errMalformed) || mine != nil || rest != nil {
			t.Errorf("%s: %v, %v, rest %v; want errMalformed and nothing else", name, mine, err, rest)
		}
	}
}
