package engine

import "errors"

// The errors core exports (core documents each).
var (
	ErrInvalidLimit = errors.New("redlimit: invalid limit")
	ErrInvalidKey   = errors.New("redlimit: invalid key")
	ErrInvalidCost  = errors.New("redlimit: invalid cost")
	ErrTimeout      = errors.New("redlimit: no answer from Redis in time")
	ErrUnavailable  = errors.New("redlimit: Redis unavailable")
	ErrSettled      = errors.New("redlimit: reservation already settled")
)
