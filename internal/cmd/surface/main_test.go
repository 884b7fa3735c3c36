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
// type of their own. Issue 32 added core's MaxCount (the largest Rate, a
// uint32's, which envoyrls and the metrics read). Issue 33 moved the
// engine into core, so that core's types are its own, not defined types
// of an internal package's: what the HTTP layer decides beyond AllowAll
// became core's documented API, not conversions into internal/engine:
// Request and Decision with Limiter.Decide (each limit in a scope and at
// a cost of its own, every limit's result), MaxLimits, CheckLimits and
// Limit.StateName (what a policy checks and names its header members
// after), Local with Limiter.Local and Local.Decide (FailLocal's stand-in
// for Redis), Limiter.Validate (a zero Limiter refused where it is
// handed over, by every module), Limiter.Logger, and Binding (the one
// place of the binding-limit rule, which envoyrls answers by too). The
// root package's RequestFuncs, WithRequestFuncs, RequestBudget and
// HTTPOptions replaced an internal package (policyconf) that grpclimit
// and otellimit, modules of their own, reached into; RetryAfter and
// Seconds are the one place of the rules every answer's times follow
// (HTTP, gRPC, envoyrls); Decision.Answer and Decision.Message the one
// place of a denied request's body and text, which an adapter for a
// framework not built on net/http writes (and grpclimit's status
// messages carry). Issue 35's operator tool (cmd/redlimit) added core's
// Limiter.Look and State (a key's state under a Request's limits, read
// without writing: remaining, slots held, debt, the Redis key's name),
// Limiter.ResetRequest (Reset for limits kept in a scope, as a policy's
// are) and Limit.Window (a calendar limit's true window, which the draft
// headers' w announces); and the root's StateKey, RuleState and
// Rules.States, where the HTTP layer keeps a key's state (the key as
// requests carry it, each rule's limits and scope), so that a tool
// names state exactly as the service does instead of copying its rules.
// Issue 35 also added core's WithLossCheck: how often a Limiter checks
// that Redis kept its state (restarts without persistence, FLUSHALL), and
// the way to turn that check and its marker key off.
// Issue 35 also added the root's WithLimitFailure (a failure
// policy per limit: a rate held in process while a quota fails closed),
// DecisionsFrom and ContextWithDecisions (handlers read every policy's
// Decision of their request; gRPC's interceptors put the record in the
// call's context, as ContextWithUsage), and core's Limiter.Timeout (the
// flow starts a request's one deadline at the first Limiter's timeout).
// Issue 35 also added the root's WithLimitSets (plans by
// name for one policy, checked when it is built: WithRequestLimits could
// find a plan's burst below the cost only per request) and WithAlsoKey
// (several keys of one request, an address and a user name, decided all
// or nothing: two policies charged the address for the user name's
// denials); core's several keys are a field, Request.Keys. A name added past
// these bounds needs a reason (and a new bound here).
func TestBudget(t *testing.T) {
	for _, c := range []struct {
		dir  string
		most int
	}{
		{"../../../core", 72},
		{"../../..", 77},
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
