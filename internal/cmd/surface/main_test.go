package main

import "testing"

// TestBudget: the packages users read stay small. The redesign brought
// core from 68 exported names to 44 and the root package from 76 to 46;
// the lifecycle added core's Concurrency, Reserve, Reservation (Result,
// Settle, Release) and ErrSettled, and the root's WithResponseCost (the
// redesign issue planned about ten). Issue 24 added the root's
// WithMaxCost; issue 25's one request flow added the root's Request (with
// Values), ServeRequest and WithRequestKey, which every protocol's adapter
// builds on; budgets added core's ReserveEach and SettleEach (DESIGN's),
// and the root's WithBudget and Budget (an estimate, a cost, a cap and the
// last tokens per unit) and Usage (Add, Used), UsageFrom and
// ContextWithUsage, which a streaming handler reports to and the gin,
// echo and gRPC adapters hand their handlers. Tiers (issue 26) added the
// root's WithTier, one name: a tier is written in the rules table ("*
// tier=pro"), so Rules, ParseRules and RuleSet.Update carry tiers with no
// type of their own. A name added past these
// bounds needs a reason (and a new bound here).
func TestBudget(t *testing.T) {
	for _, c := range []struct {
		dir  string
		most int
	}{
		{"../../../core", 53},
		{"../../..", 61},
	} {
		n, err := count(c.dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d exported names", c.dir, n)
		if n > c.most {
			t.Errorf("%s exports %d names, over its budget of %d", c.dir, n, c.most)
		}
	}
}

// TestCount: what counts and what does not.
func TestCount(t *testing.T) {
	n, err := count("testdata/p")
	if err != nil {
		t.Fatal(err)
	}
	// T, T.M, F, C, V1, V2; not t, t.M, T.m, f, c, fields.
	if n != 6 {
		t.Errorf("count = %d, want 6", n)
	}
}
