package redlimit_test

// Examples that docs/keys.md quotes.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/keyfunc"
	"github.com/redlimit/redlimit/nethttp"
)

func ExampleWithAlsoKey() {
	rdb, m := docsRedis()
	defer m.Close()
	defer rdb.Close()
	lim := core.New(rdb)
	attempt := func(h http.Handler, addr, user string) int {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/login", nil)
		r.RemoteAddr, r.Header["X-User"] = addr, []string{user}
		h.ServeHTTP(w, r)
		return w.Code
	}

	// 20 logins an hour per address, and 3 per user name, in one decision:
	// a request either key denies is charged to neither.
	perAddress := core.Limit{Algorithm: core.FixedWindow, Rate: 20, Period: time.Hour}
	perUser := core.Limit{Algorithm: core.SlidingLog, Rate: 3, Period: time.Hour}
	login := nethttp.New(lim, perAddress, redlimit.WithName("login"),
		redlimit.WithAlsoKey("user", keyfunc.Header("X-User"), perUser))(okHandler)

	for range 5 {
		fmt.Print(attempt(login, "192.0.2.1:1000", "bob"), " ")
	}
	// bob's two 429s were charged to no address: carol, behind the same
	// address, has 20 - 3 left of it.
	fmt.Println(attempt(login, "192.0.2.1:1000", "carol"))
	// Output: 200 200 200 429 429 200
}
