// Package engine is the implementation behind package core: limits and
// their state's names, the scripts and their replies, decisions (the deny
// cache, prefetched allowance, reservations and their settlement), the
// carrier that takes script calls to Redis (lanes per node, direct sends,
// batches, the breaker) and FailLocal's in-process fallback.
//
// Package core is its documented face: core.Limiter and core.Reservation
// are defined types of this package's Limiter and Reservation, and
// core.Limit, core.Result and core.Stats have the fields of this
// package's, so that each converts to the other (engine.Limit(l)) and the
// compiler keeps them in step. The HTTP layer (package redlimit) calls
// what it needs beyond core's API here, on the same types: a decision of
// limits each in its own scope, with every limit's result (Limiter.Decide
// with a Request), the check of such a set of limits, the names of a
// limit's state, and the fallback.
//
// A decision's way, top down: Limiter.Decide (decide.go: prepare, the
// prefetched allowance, the deny cache, ask) → carrier.run (carrier.go:
// the key's lane, its breaker, sent from the caller's goroutine when the
// lane is free, else queued for a sender) → trip.run (transport.go: one
// round trip of one or more script calls) → the script (package lua); and
// back up through readReply (reply.go).
package engine

// MaxLimits is the most limits one decision may hold.
const MaxLimits = 16
