package redlimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/internal/redistest"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttp"
)

// loginFrom sends POST /login for user from the address ip to h and
// returns the answer.
func loginFrom(h http.Handler, ip, user string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/login", nil)
	r.RemoteAddr = ip + ":1234"
	if user != "" {
		r.Header.Set("X-User", user)
	}
	h.ServeHTTP(w, r)
	return w
}

// TestAlsoKey: a login limited per address and per user name in one
// decision: a user name's 429s are charged to no address (with two
// policies, one per key, they were: the address of an attacker guessing
// one user's password was locked out with everyone behind it); the
// headers name each key's limits; a request without a user name is
// answered 400.
func TestAlsoKey(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	perIP := core.Limit{Algorithm: core.FixedWindow, Rate: 5, Period: time.Hour}
	perUser := core.Limit{Algorithm: core.SlidingLog, Rate: 2, Period: time.Hour}

	// Two policies, one per key: bob's 429s use up address B.
	two := nethttp.New(lim, perIP, redlimit.WithName("ip-only"))(
		nethttp.New(lim, perUser, redlimit.WithName("user-only"), redlimit.WithKey(keyfunc.Header("X-User")))(okHandler))
	for range 5 {
		loginFrom(two, "192.0.2.2", "bob")
	}
	if w := loginFrom(two, "192.0.2.2", "carol"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("two policies: carol from bob's address: %d; want 429 (the address paid for bob's denials)", w.Code)
	}

	// One policy of two keys: bob's 429s are charged to neither.
	one := nethttp.New(lim, perIP, redlimit.WithName("login"), redlimit.WithHeaders(redlimit.HeadersBoth),
		redlimit.WithAlsoKey("user", keyfunc.Header("X-User"), perUser))(okHandler)
	var codes []string
	for range 7 {
		codes = append(codes, fmt.Sprint(loginFrom(one, "192.0.2.2", "bob").Code))
	}
	if got, want := strings.Join(codes, " "), "200 200 429 429 429 429 429"; got != want {
		t.Errorf("bob from B: %s, want %s", got, want)
	}
	w := loginFrom(one, "192.0.2.2", "carol")
	if w.Code != http.StatusOK || w.Header().Get("X-RateLimit-Remaining") != "1" {
		t.Errorf("carol from B: %d, remaining %q; want 200, 1 (her user name's)", w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	if got := w.Header().Get("RateLimit"); !strings.HasPrefix(got, `"login";r=2;`) || !strings.Contains(got, `, "login/user";r=1;`) {
		t.Errorf("RateLimit: %q, want \"login\";r=2 (B: 5 less bob's 2 and carol's 1) and \"login/user\";r=1", got)
	}
	if got, want := w.Header().Get("RateLimit-Policy"), `"login/user";q=2;w=3600`; !strings.Contains(got, want) {
		t.Errorf("RateLimit-Policy: %q, want it to hold %q", got, want)
	}
	if w := loginFrom(one, "192.0.2.3", ""); w.Code != http.StatusBadRequest {
		t.Errorf("no user name: %d, want 400", w.Code)
	}
}

// TestAlsoKeyRefused: a WithAlsoKey that could never decide a request is
// refused when the policy is built.
func TestAlsoKeyRefused(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	user := keyfunc.Header("X-User")
	five := core.PerMinute(5)
	many := make([]core.Limit, 0, 16)
	for i := range 16 {
		many = append(many, core.Limit{Rate: 5, Period: time.Duration(i+1) * time.Second})
	}
	for _, tt := range []struct {
		opts []redlimit.Option
		says string
	}{
		{[]redlimit.Option{redlimit.WithAlsoKey("user", nil, five)}, "nil key function"},
		{[]redlimit.Option{redlimit.WithAlsoKey("user", user)}, "no limits"},
		{[]redlimit.Option{redlimit.WithAlsoKey("", user, five)}, "want a name"},
		{[]redlimit.Option{redlimit.WithAlsoKey("a b", user, five)}, "byte ' '"},
		{[]redlimit.Option{redlimit.WithAlsoKey("u", user, five), redlimit.WithAlsoKey("u", user, five)}, "given twice"},
		{[]redlimit.Option{redlimit.WithAlsoKey("u", user, five, five)}, "share"},
		{[]redlimit.Option{redlimit.WithCost(6), redlimit.WithAlsoKey("u", user, core.PerMinute(10), core.PerHour(5))}, "WithCost(6) is above the burst 5"},
		{[]redlimit.Option{redlimit.WithAlsoKey("u", user, many...)}, "at most 16"},
		{[]redlimit.Option{redlimit.WithAlsoKey("u", user, five),
			redlimit.WithRequestLimits(func(*http.Request) ([]core.Limit, error) { return nil, nil })}, "WithLimitSets"},
	} {
		if _, err := redlimit.NewPolicy(lim, core.PerMinute(10), tt.opts...); err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("NewPolicy: %v; want an error saying %q", err, tt.says)
		}
	}
	if _, err := redlimit.NewRuleSet(lim, redlimit.Rules{"*": "1/s"}, redlimit.WithAlsoKey("u", user, five)); err == nil {
		t.Error("NewRuleSet with WithAlsoKey: no error")
	}
	p := mustPolicy(t, lim, five, redlimit.WithAlsoKey("u", user, five))
	if got := redlimit.HTTPOptions(p); !slices.Contains(got, "redlimit.WithAlsoKey") {
		t.Errorf("HTTPOptions: %v, want redlimit.WithAlsoKey among them", got)
	}
}

// TestAlsoKeyConcurrent: logins from 3 addresses for 4 user names, only
// failures counted (WithResponseCost), through 4 instances at once, on a
// standalone redis-server and on a 3-master Cluster, where an address and
// a user name live in different slots: Redis counts, for each key, exactly
// the failed logins that were admitted, never one that was denied, and
// never more than its limit.
func TestAlsoKeyConcurrent(t *testing.T) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		s := redistest.Standalone(t)
		testAlsoKeyConcurrent(t, func() redis.UniversalClient { return s.Client(t) })
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := redistest.NewCluster(t, 3)
		testAlsoKeyConcurrent(t, func() redis.UniversalClient { return c.Client(t) })
	})
}

func testAlsoKeyConcurrent(t *testing.T, newClient func() redis.UniversalClient) {
	perIP := core.Limit{Algorithm: core.FixedWindow, Rate: 12, Period: time.Hour}
	perUser := core.Limit{Algorithm: core.SlidingLog, Rate: 3, Period: time.Hour}
	onlyFailures := redlimit.WithResponseCost(func(_ *http.Request, status int, _ http.Header) int {
		if status < 400 {
			return 0
		}
		return 1
	})
	login := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Password") != "right" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	})
	var apps []http.Handler
	var lims []*core.Limiter
	for range 4 {
		lim := core.New(newClient(), core.WithTimeout(10*time.Second))
		lims = append(lims, lim)
		apps = append(apps, nethttp.New(lim, perIP, redlimit.WithName("login"), onlyFailures,
			redlimit.WithAlsoKey("user", keyfunc.Header("X-User"), perUser))(login))
	}
	var mu sync.Mutex
	failed := map[string]int{} // admitted failures per key
	denied := 0
	var wg sync.WaitGroup
	deadline := time.Now().Add(20 * time.Second)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 6))
			for range 25 {
				if time.Now().After(deadline) {
					return
				}
				ip, user := fmt.Sprintf("198.51.100.%d", rng.IntN(3)), fmt.Sprint("u", rng.IntN(4))
				w := httptest.NewRecorder()
				r := httptest.NewRequest(http.MethodPost, "/login", nil)
				r.RemoteAddr, r.Header["X-User"] = ip+":1", []string{user}
				if rng.IntN(4) == 0 {
					r.Header.Set("X-Password", "right")
				}
				apps[g%len(apps)].ServeHTTP(w, r)
				mu.Lock()
				switch w.Code {
				case http.StatusTooManyRequests:
					denied++
				case http.StatusUnauthorized:
					failed["ip:"+ip]++
					failed["header:X-User:"+user]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("%d denied; admitted failures %v", denied, failed)
	if denied == 0 {
		t.Error("no request was denied: the check needs denials")
	}
	ctx := context.Background()
	check := func(key, scope string, l core.Limit) {
		d, err := lims[0].Decide(ctx, &core.Request{Key: key, Limits: []core.Limit{l}, Scopes: []string{scope}, N: 0})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := l.Capacity()-d.Remaining, failed[key]; got != want {
			t.Errorf("%s: Redis counts %d, %d failed logins were admitted", key, got, want)
		}
	}
	for i := range 3 {
		check(fmt.Sprintf("ip:198.51.100.%d", i), "login", perIP)
	}
	for i := range 4 {
		check(fmt.Sprint("header:X-User:u", i), "login/user", perUser)
	}
}

// TestAlsoKeyWithSets: a limit set replaces the policy key's limits only;
// the second key's stay.
func TestAlsoKeyWithSets(t *testing.T) {
	t.Parallel()
	lim, _ := embedded(t)
	perUser := core.Limit{Algorithm: core.SlidingLog, Rate: 2, Period: time.Hour}
	app := nethttp.New(lim, core.Limit{Algorithm: core.FixedWindow, Rate: 1, Period: time.Hour}, redlimit.WithName("login"),
		redlimit.WithAlsoKey("user", keyfunc.Header("X-User"), perUser),
		redlimit.WithLimitSets(map[string]string{"pro": "100/h fixed_window"}, func(q redlimit.Request) (string, error) {
			return q.HTTP.Header.Get("X-Plan"), nil
		}))(okHandler)
	send := func(plan, user string) int {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/login", nil)
		r.Header.Set("X-Plan", plan)
		r.Header.Set("X-User", user)
		app.ServeHTTP(w, r)
		return w.Code
	}
	got := fmt.Sprint(send("pro", "bob"), send("pro", "bob"), send("pro", "bob"), send("", "carol"), send("pro", "carol"))
	if want := "200 200 429 429 200"; got != want { // bob's user name denies his third; the default's 1/h carol's first
		t.Errorf("got %s, want %s", got, want)
	}
}
