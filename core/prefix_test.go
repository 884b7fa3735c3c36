package core_test

import (
	"context"
	"testing"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestPrefixesKeepApart: Limiters with different prefixes never share
// state, in no scope or in one (issue 24): each pair once wrote one key.
func TestPrefixesKeepApart(t *testing.T) {
	t.Parallel()
	rdb := redistest.Standalone(t).Client(t)
	ctx := context.Background()
	l := core.PerMinute(3)
	type side struct{ prefix, scope string }
	for _, c := range [][2]side{
		{{"P{", ""}, {"P%7B", ""}},
		{{"P:", "login"}, {"P:login:", ""}},
		{{"", "login"}, {"login:", ""}},
		{{"app", "login"}, {"appl", "ogin"}},
		{{"app", "login"}, {"app:", "login"}},
		{{"P:", "a:b"}, {"P:a:", "b"}},
	} {
		var results [2]core.Result
		for i, s := range c {
			lim := core.New(rdb, patient, core.WithPrefix(s.prefix))
			var scopes []string
			if s.scope != "" {
				scopes = []string{s.scope}
			}
			n := 2 - i // the first drains 2 of 3, the second takes 1
			res, _, err := lim.DecideEach(ctx, "k{}%", scopes, []core.Limit{l}, n, nil)
			if err != nil {
				t.Fatal(err)
			}
			results[i] = res
		}
		if results[1].Remaining != 2 {
			t.Errorf("prefix %q in scope %q after prefix %q in scope %q: %+v; want a fresh state",
				c[1].prefix, c[1].scope, c[0].prefix, c[0].scope, results[1])
		}
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
