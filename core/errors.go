package core

import "errors"

// ErrInvalidLimit is wrapped by every error that reports a Limit that cannot
// be enforced: from Limit.Validate, ParseLimit, ParseLimits, and Limiter
// calls given such a limit. Test for it with errors.Is.
var ErrInvalidLimit = errors.New("redlimit: invalid limit")

// ErrInvalidKey is wrapped by the error a Limiter returns for a key it will
// not store: empty, or longer than 1024 bytes (hash longer identities
// first; the HTTP layer does).
var ErrInvalidKey = errors.New("redlimit: invalid key")

// ErrInvalidCost is wrapped by the error of a negative cost, and by the
// error WaitN returns at once for a cost above the limit's burst, which no
// wait can admit.
var ErrInvalidCost = errors.New("redlimit: invalid cost")

// ErrTimeout is wrapped by the error of a decision that got no answer from
// Redis within the Limiter's timeout (WithTimeout). That error wraps
// context.DeadlineExceeded too. The decision may still reach Redis and
// count.
var ErrTimeout = errors.New("redlimit: no answer from Redis in time")

// ErrUnavailable is wrapped by the error of a decision answered at once,
// without asking Redis, because Redis keeps failing (the breaker is open;
// see WithBreaker) or because too many decisions already wait for it. It
// is retried soon: one decision in a while tests whether Redis is back.
var ErrUnavailable = errors.New("redlimit: Redis unavailable")

// ErrSettled is wrapped by the error of a second Settle or Release of one
// Reservation: a settlement is sent at most once.
var ErrSettled = errors.New("redlimit: reservation already settled")
