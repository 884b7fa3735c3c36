package ctxvalue

import (
	"errors"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/keyfunc"
)

type id struct{ n string }

func (i *id) String() string { return "id-" + i.n }

// TestKey: what each kind of value makes, and the errors: missing and
// empty values wrap keyfunc.ErrNoKey, other types do not.
func TestKey(t *testing.T) {
	t.Parallel()
	var nilID *id
	for _, tt := range []struct {
		v     any
		want  string // the key, or what the error says
		noKey bool   // the error wraps keyfunc.ErrNoKey
	}{
		{"alice", "user:alice", false},
		{int8(-8), "user:-8", false},
		{int16(16), "user:16", false},
		{int32(32), "user:32", false},
		{int64(-64), "user:-64", false},
		{7, "user:7", false},
		{uint(1), "user:1", false},
		{uint8(8), "user:8", false},
		{uint16(16), "user:16", false},
		{uint32(32), "user:32", false},
		{uint64(1 << 63), "user:9223372036854775808", false},
		{&id{"x"}, "user:id-x", false},
		{nil, `no gin context value "user"`, true},
		{nilID, `no gin context value "user"`, true},
		{"", `gin context value "user" is empty`, true},
		{&id{""}, `user:id-`, false},
		{1.5, `gin context value "user" is a float64`, false},
		{[]byte("x"), `is a []uint8`, false},
	} {
		key, err := Key("gin", "user", tt.v)
		switch {
		case err == nil && key != tt.want:
			t.Errorf("Key(%#v) = %q, want %q", tt.v, key, tt.want)
		case err != nil && (!strings.Contains(err.Error(), tt.want) || errors.Is(err, keyfunc.ErrNoKey) != tt.noKey):
			t.Errorf("Key(%#v): %v; want an error saying %q, wrapping ErrNoKey: %v", tt.v, err, tt.want, tt.noKey)
		case err == nil && strings.Contains(tt.want, " "):
			t.Errorf("Key(%#v) = %q, want an error saying %q", tt.v, key, tt.want)
		}
	}
}
