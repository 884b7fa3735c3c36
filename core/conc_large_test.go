package core_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
)

// TestConcurrencyLargeReservation: a Reservation of thousands of slots, up
// to the most a Concurrency limit may have, is taken, counted and freed by
// Release and by Settle, on miniredis and on redis-server: the script
// passes them to Redis in chunks, never more values to one command than
// Lua can unpack.
//
// What it shows is what is counted, not how fast: a script call of 100 000
// slots took up to 3.1 s on miniredis under -race on 2 busy cores, past
// go-redis's default ReadTimeout (3 s), which failed it as an i/o
// timeout. So the clients read for up to a minute, and the Limiters wait
// as long.
func TestConcurrencyLargeReservation(t *testing.T) {
	t.Parallel()
	const slow = time.Minute
	client := func(t *testing.T, addr string) redis.UniversalClient {
		c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: slow, WriteTimeout: slow})
		t.Cleanup(func() { c.Close() })
		return c
	}
	servers := map[string]func(t *testing.T) redis.UniversalClient{
		"miniredis":  func(t *testing.T) redis.UniversalClient { return client(t, miniredis.RunT(t).Addr()) },
		"standalone": func(t *testing.T) redis.UniversalClient { return client(t, redistest.Standalone(t).Addr) },
	}
	for name, newClient := range servers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rdb := newClient(t)
			for _, n := range []int{5000, core.MaxSlots} {
				l := core.Limit{Algorithm: core.Concurrency, Rate: n, Period: time.Minute}
				for _, how := range []string{"Release", "Settle"} {
					lim := core.New(rdb, core.WithTimeout(slow), core.WithPrefix(uniquePrefix()))
					key := fmt.Sprintf("k%d", n)
					began := time.Now()
					r := concReserve(t, lim, key, []core.Limit{l}, n)
					took := time.Since(began)
					if res := r.Result(); !res.Allowed || res.Remaining != 0 {
						t.Fatalf("%d slots of %v: %+v, want allowed, none left", n, l, res)
					}
					if res := concReserve(t, lim, key, []core.Limit{l}, 1).Result(); res.Allowed {
						t.Fatalf("%d slots held of %d: one more admitted", n, n)
					}
					var err error
					if how == "Release" {
						err = r.Release(context.Background())
					} else {
						err = r.Settle(context.Background(), 0)
					}
					if err != nil {
						t.Fatalf("%s of %d slots: %v", how, n, err)
					}
					if free := freeSlots(t, lim, key, l); free != n {
						t.Fatalf("after the %s of %d slots: %d free, want %d", how, n, free, n)
					}
					t.Logf("%d slots: Reserve took %v", n, took)
				}
			}
		})
	}
}
