package redlimit_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// TestRefundAcrossRuleUpdate: failed logins count (WithResponseCost), a
// successful one is refunded. A login is reserved under "3/s"; 200 ms
// later RuleSet.Update raises the rule to "10/s", its state kept, and
// failed logins are sent until one is denied; then the first login
// succeeds, its reservation refunded, and failed logins are sent again.
// At that instant at most the new burst, 10, fail through: the refund of
// a reservation counted under the old rate gives nothing back (issue 32,
// defect 4: 11 before).
func TestRefundAcrossRuleUpdate(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	t.Cleanup(func() { rdb.Close() })
	lim := core.New(rdb, core.WithClock(clock), core.WithTimeout(10*time.Second))
	failuresOnly := redlimit.WithResponseCost(func(_ *http.Request, status int, _ http.Header) int {
		if status == http.StatusUnauthorized {
			return 1
		}
		return 0
	})
	rs, err := redlimit.NewRuleSet(lim, redlimit.Rules{"POST /login": "3/s"}, failuresOnly)
	if err != nil {
		t.Fatal(err)
	}
	login := func(status int, started, hold chan struct{}) int {
		r := httptest.NewRequest(http.MethodPost, "/login", nil)
		r.RemoteAddr = "203.0.113.7:1"
		w := httptest.NewRecorder()
		redlimit.Serve(rs, w, r, func(w http.ResponseWriter, _ *http.Request) int {
			if started != nil {
				close(started)
				<-hold
			}
			w.WriteHeader(status)
			return status
		})
		return w.Code
	}
	failUntilDenied := func() int {
		for n := 0; n < 100; n++ {
			if code := login(http.StatusUnauthorized, nil, nil); code != http.StatusUnauthorized {
				return n
			}
		}
		t.Fatal("100 failed logins passed at one instant")
		return 0
	}

	started, hold, done := make(chan struct{}), make(chan struct{}), make(chan int)
	go func() { done <- login(http.StatusOK, started, hold) }()
	<-started // reserved under 3/s
	mu.Lock()
	now = now.Add(200 * time.Millisecond)
	mu.Unlock()
	if err := rs.Update(redlimit.Rules{"POST /login": "10/s"}); err != nil {
		t.Fatal(err)
	}
	failed := failUntilDenied()
	close(hold)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("the login in flight: %d, want 200", code)
	}
	if failed += failUntilDenied(); failed > 10 {
		t.Fatalf("%d failed logins at one instant under 10/s after a refund of a login reserved under 3/s; want at most 10", failed)
	}
}
