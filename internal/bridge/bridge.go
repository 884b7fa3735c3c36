// Package bridge carries what package core shares with the other redlimit
// packages but not with its users: a decision whose limits each keep their
// state in a scope of their own (the HTTP layer's policy names), with every
// limit's result; the check of such a set of limits; the names of a limit's
// state; the Limiter's logger; and the in-process fallback of FailLocal.
//
// Core fills each variable when it is initialised, which is before any
// package that imports core runs; each holds a function of the type its
// comment gives (this package cannot name core's types, since core imports
// it). Package redlimit asserts them once, in its own package variables, so
// a mismatch fails every test of that package at once.
package bridge

// MaxLimits is the most limits one decision may hold.
const MaxLimits = 16

var (
	// Decide is
	//
	//	func(l *core.Limiter, ctx context.Context, key string, scopes []string,
	//		limits []core.Limit, n int, each []core.Result) (res core.Result, binding int, err error)
	//
	// AllowAll with a scope per limit (scopes[i] for limits[i]; "" is
	// AllowAll's) that also stores each limit's own result in each (as long
	// as limits) and returns the binding limit's index.
	Decide any

	// Reserve is
	//
	//	func(l *core.Limiter, ctx context.Context, key string, scopes []string,
	//		limits []core.Limit, n int, each []core.Result) (r *core.Reservation, binding int, err error)
	//
	// Decide's Reserve: Concurrency limits too, and a Reservation (never
	// nil without an error) to settle.
	Reserve any

	// ReserveEach is
	//
	//	func(l *core.Limiter, ctx context.Context, key string, scopes []string,
	//		limits []core.Limit, costs []int, upTo uint32, each []core.Result) (r *core.Reservation, binding int, err error)
	//
	// Reserve's core.Limiter.ReserveEach: limits[i] charged costs[i]. A
	// limit whose bit of upTo is set (1<<i) takes up to costs[i]: as many
	// as it has left, if it has any, else it denies (its RetryAfter is
	// until one is back); when the decision allows, costs[i] is set to
	// what each limit took, which SettleEach settles from.
	ReserveEach any

	// Check is
	//
	//	func(scopes []string, limits []core.Limit) error
	//
	// nil if the limits, in their scopes, can be decided together: 1 to
	// MaxLimits valid limits, no two of which would share state.
	Check any

	// State is
	//
	//	func(l core.Limit) (variant, period string)
	//
	// what tells l's state apart from other limits' of one key and scope:
	// its algorithm's variant ("gcra", "token_bucket:stepped") and its
	// period as keys write it ("1m", "10s").
	State any

	// Logger is
	//
	//	func(l *core.Limiter) *slog.Logger
	//
	// the logger the Limiter was given (core.WithLogger).
	Logger any

	// Fallback is
	//
	//	func(l *core.Limiter, keys int) func(key string, scopes []string, limits []core.Limit,
	//		costs []int, upTo uint32, each []core.Result) (res core.Result, binding int)
	//
	// a new in-process stand-in for l's Redis, holding at most keys
	// states: it decides as ReserveEach does (limits[i] charged costs[i],
	// taking up to it if its bit of upTo is set), each limit as GCRA with the
	// limit's Rate, Period and Burst divided by the instances that share
	// l's keys (l counts them from then on), on the process's clock. It is
	// safe for concurrent use.
	Fallback any
)
