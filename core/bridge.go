package core

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redlimit/redlimit/internal/bridge"
)

// What the other redlimit packages use of core beyond its API (see package
// bridge for each function's contract).
func init() {
	bridge.Decide = func(l *Limiter, ctx context.Context, key string, scopes []string, limits []Limit, n int, each []Result) (Result, int, error) {
		return l.decide(ctx, key, scopes, limits, n, each)
	}
	bridge.Reserve = func(l *Limiter, ctx context.Context, key string, scopes []string, limits []Limit, n int, each []Result) (*Reservation, int, error) {
		return l.reserve(ctx, key, scopes, limits, n, nil, 0, each)
	}
	bridge.ReserveEach = func(l *Limiter, ctx context.Context, key string, scopes []string, limits []Limit, costs []int, upTo uint32, each []Result) (*Reservation, int, error) {
		if len(costs) != len(limits) {
			return nil, 0, fmt.Errorf("%w: %d costs for %d limits", ErrInvalidCost, len(costs), len(limits))
		}
		return l.reserve(ctx, key, scopes, limits, 0, costs, upTo, each)
	}
	bridge.Check = checkLimits
	bridge.State = func(l Limit) (variant, period string) {
		info, err := infos.get(l)
		if err != nil {
			return "", ""
		}
		return info.d.suffix, info.period
	}
	bridge.Logger = func(l *Limiter) *slog.Logger { return l.log }
	bridge.Fallback = func(l *Limiter, keys int) func(string, []string, []Limit, []int, uint32, []Result) (Result, int) {
		share := func() int { return 1 }
		if l != nil && l.engine != nil {
			l.peers.on.Store(true)
			share = l.peers.share
		}
		return newLocalLimiter(keys, share).allow
	}
}
