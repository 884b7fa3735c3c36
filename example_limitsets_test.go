package redlimit_test

// Examples that docs/budgets.md quotes.

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttp"
)

func ExampleWithLimitSets() {
	rdb, m := docsRedis()
	defer m.Close()
	defer rdb.Close()
	lim := core.New(rdb)

	// Plans by name, typically from a configuration file; the policy's
	// own limit is the default, for a request of no plan or another one.
	plans := map[string]string{
		"pro":        "600/m, 100000/d",
		"enterprise": "6000/m",
	}
	planOf := func(q redlimit.Request) (string, error) {
		return q.HTTP.Header.Get("X-Plan"), nil // gin, echo, chi: ginlimit.Tier("plan") ...
	}
	p, err := redlimit.NewPolicy(lim, core.PerMinute(60),
		redlimit.WithName("api"), redlimit.WithCost(5), redlimit.WithLimitSets(plans, planOf))
	if err != nil {
		fmt.Println(err) // a plan whose burst is below the cost, a bad limit: named here, at start-up
		return
	}
	app := nethttp.Middleware(p)(okHandler)
	for _, plan := range []string{"", "pro", "enterprise", "gold"} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-Plan", plan)
		app.ServeHTTP(w, r)
		fmt.Printf("%q: %d, limit %s\n", plan, w.Code, w.Header().Get("X-RateLimit-Limit"))
	}

	// Checked when the policy is built: no request of a plan of 3 a
	// minute could pay 5.
	_, err = redlimit.NewPolicy(lim, core.PerMinute(60), redlimit.WithCost(5),
		redlimit.WithLimitSets(map[string]string{"trial": "3/m"}, planOf))
	fmt.Println(err)
	// Output:
	// "": 200, limit 60
	// "pro": 200, limit 600
	// "enterprise": 200, limit 6000
	// "gold": 200, limit 60
	// redlimit: WithLimitSets: set "trial": redlimit: invalid cost: WithCost(5) is above the burst 3 of 3/m: no request of the set could ever be admitted
}
