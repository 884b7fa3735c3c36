// Package policyconf holds what the Options of a redlimit policy say, so
// that the root package and the protocol adapters of other modules under
// github.com/redlimit/redlimit (grpclimit, otellimit) set one record.
//
// The functions of a request are kept in a form every protocol can call:
// of a redlimit.Request, whose HTTP field is the *http.Request when there
// is one; taken by value, since a pointer passed to a function value goes
// to the heap (an allocation per request). The root package's options of an *http.Request wrap their
// function in that form; grpclimit's options of a call set it directly,
// through the setters here. This package cannot import the root package
// (which imports it), so the root package's types are its type parameters:
// Q is redlimit.Request, D redlimit.Decision, and R the root package's own
// record of the options that read no request. A setter's type parameters
// are inferred from the Option type it is asked for:
//
//	policyconf.Skip[redlimit.Option](func(q redlimit.Request) bool { ... })
package policyconf

import (
	"net/http"

	"github.com/redlimit/redlimit/core"
)

// Config is what the Options of a policy say.
type Config[Q, D, R any] struct {
	Funcs[Q, D]
	// HTTPOnly names the options that set a function of Funcs which reads
	// only an *http.Request, while their function is the one set.
	HTTPOnly HTTPOnly
	// Rest is the root package's record of every other option.
	Rest R
}

// Funcs are a policy's functions of a request, for every protocol; nil
// when not set. Each must be safe for concurrent use.
type Funcs[Q, D any] struct {
	// Key tells requests apart; an error is a request without a key.
	Key func(q Q) (string, error)
	// Skip exempts the requests for which it returns true.
	Skip func(q Q) bool
	// Limits picks a request's limits; nil limits: the policy's own.
	Limits func(q Q) ([]core.Limit, error)
	// Observe sees every decision.
	Observe func(q Q, d D)
	// ResponseCost is an admitted request's true cost, after its handler:
	// status is HTTP's (a gRPC call's code mapped to it), header the
	// response header (nil for a request of another protocol).
	ResponseCost func(q Q, status int, header http.Header) int
	// Budgets are limits in other units than requests, each with its
	// estimate and cost per request (redlimit.WithBudget).
	Budgets []Budget[Q]
}

// Budget is a policy's limits in one unit other than requests, charged
// Estimate before a request's handler and Cost after it, in the decision
// of the policy's request limits (redlimit.Budget documents each field).
type Budget[Q any] struct {
	Limits   []core.Limit
	Estimate func(q Q) int
	Cost     func(q Q, status int, header http.Header) int
	MaxCost  int
	TakeRest bool
}

// HTTPOnly names the root package's options ("redlimit.WithKey") whose
// function of an *http.Request is the policy's Key, Skip or Limits; ""
// when that function reads requests of every protocol, or is not set. An
// adapter of another protocol refuses such a policy: the function would
// never see one of its requests.
type HTTPOnly struct {
	Key, Skip, Limits, Budget string
}

// Key sets the policy's key function, for every protocol.
func Key[O ~func(*Config[Q, D, R]), Q, D, R any](key func(q Q) (string, error)) O {
	return func(c *Config[Q, D, R]) { c.Key, c.HTTPOnly.Key = key, "" }
}

// Skip sets the function that exempts requests, for every protocol.
func Skip[O ~func(*Config[Q, D, R]), Q, D, R any](skip func(q Q) bool) O {
	return func(c *Config[Q, D, R]) { c.Skip, c.HTTPOnly.Skip = skip, "" }
}

// Limits sets the function that picks a request's limits, for every
// protocol.
func Limits[O ~func(*Config[Q, D, R]), Q, D, R any](pick func(q Q) ([]core.Limit, error)) O {
	return func(c *Config[Q, D, R]) { c.Limits, c.HTTPOnly.Limits = pick, "" }
}

// Observe adds an observer of every decision, after those already set; a
// nil observe adds none.
func Observe[O ~func(*Config[Q, D, R]), Q, D, R any](observe func(q Q, d D)) O {
	return func(c *Config[Q, D, R]) {
		if observe == nil {
			return
		}
		if prev := c.Observe; prev != nil {
			c.Observe = func(q Q, d D) { prev(q, d); observe(q, d) }
			return
		}
		c.Observe = observe
	}
}

// ResponseCost sets the function that settles every admitted request after
// its handler, for every protocol.
func ResponseCost[O ~func(*Config[Q, D, R]), Q, D, R any](cost func(q Q, status int, header http.Header) int) O {
	return func(c *Config[Q, D, R]) { c.ResponseCost = cost }
}

// AddBudget adds a budget whose functions read requests of every
// protocol.
func AddBudget[O ~func(*Config[Q, D, R]), Q, D, R any](b Budget[Q]) O {
	return func(c *Config[Q, D, R]) { c.Budgets = append(c.Budgets, b) }
}

// Apply returns what opts say, applied in order to an empty Config (no
// defaults): for an adapter to check what a policy would be built with.
func Apply[O ~func(*Config[Q, D, R]), Q, D, R any](opts []O) Config[Q, D, R] {
	var c Config[Q, D, R]
	for _, opt := range opts {
		opt(&c)
	}
	return c
}
