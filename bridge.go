package redlimit

import (
	"context"
	"log/slog"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/bridge"
)

// What this package uses of core beyond its API; package bridge documents
// each function.
var (
	decide = bridge.Decide.(func(l *core.Limiter, ctx context.Context, key string, scopes []string,
		limits []core.Limit, n int, each []core.Result) (core.Result, int, error))
	reserve = bridge.Reserve.(func(l *core.Limiter, ctx context.Context, key string, scopes []string,
		limits []core.Limit, n int, each []core.Result) (*core.Reservation, int, error))
	reserveEach = bridge.ReserveEach.(func(l *core.Limiter, ctx context.Context, key string, scopes []string,
		limits []core.Limit, costs []int, upTo uint32, each []core.Result) (*core.Reservation, int, error))
	checkLimits = bridge.Check.(func(scopes []string, limits []core.Limit) error)
	limitState  = bridge.State.(func(l core.Limit) (variant, period string))
	limiterLog  = bridge.Logger.(func(l *core.Limiter) *slog.Logger)
	newFallback = bridge.Fallback.(func(l *core.Limiter, keys int) fallback)
)

// fallback decides as Redis would, in process: FailLocal's.
type fallback = func(key string, scopes []string, limits []core.Limit, costs []int, upTo uint32, each []core.Result) (core.Result, int)
