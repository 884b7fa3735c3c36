package engine

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

// TestNextReply: a batch script's reply splits into each call's reply or
// error, whatever the length of the message; a reply too short for what it
// announces is an error for the rest, never a panic.
func TestNextReply(t *testing.T) {
	t.Parallel()
	one := []int64{4, 1, 9, 5, 12}                                      // one limit, allowed: the short reply
	two := []int64{16, 0, 77, 1, 4, 0, 7, 0, 0, 5, 0, 0, 3, 3, 0, 3, 0} // two limits, the second denies
	settled := []int64{1, 1}                                            // a settlement's {1}
	for _, msg := range []string{"", "W", "WRONGT", "WRONGTY", strings.Repeat("é", maxBatchError/2)} {
		reply := slices.Concat(one, packError(msg), two, settled)
		mine, rest, err := nextReply(reply)
		if err != nil || !slices.Equal(mine, one[1:]) {
			t.Fatalf("first: %v, %v", mine, err)
		}
		mine, rest, err = nextReply(rest)
		if !redis.HasErrorPrefix(err, msg) || err.Error() != msg || mine != nil {
			t.Fatalf("message of %d bytes: %q, %v", len(msg), err, mine)
		}
		mine, rest, err = nextReply(rest)
		if err != nil || !slices.Equal(mine, two[1:]) {
			t.Fatalf("after a message of %d bytes: %v, %v", len(msg), mine, err)
		}
		mine, rest, err = nextReply(rest)
		if err != nil || !slices.Equal(mine, settled[1:]) || len(rest) != 0 {
			t.Fatalf("the settlement: %v, %v, rest %v", mine, err, rest)
		}
	}
	for name, reply := range map[string][]int64{
		"empty":         nil,
		"short reply":   one[:3],
		"short message": packError("WRONGTYPE")[:2],
		"long message":  packError(strings.Repeat("x", maxBatchError+1)),
		"past the end":  {20, 1, 77, 1, 9, 0, 5, 0, 0, 0},
	} {
		if mine, rest, err := nextReply(reply); !errors.Is(err, errMalformed) || mine != nil || rest != nil {
			t.Errorf("%s: %v, %v, rest %v; want errMalformed and nothing else", name, mine, err, rest)
		}
	}
}
