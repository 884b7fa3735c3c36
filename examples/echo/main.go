// Command echo is a small echo API behind redlimit, as a service behind a
// load balancer would have it: a limit per client address on every
// request, a stricter one on POST /login, on /api a limit per signed-in
// user with a daily quota, and on /partner a limit per partner, keyed by
// what a middleware stored with c.Set.
//
//	go run ./examples/echo            # on localhost:8080, limits in embedded Redis
//	curl -i localhost:8080/hello
//	curl -i -H 'Authorization: Bearer alice' localhost:8080/api/orders
//
// ADDR sets the address to listen on, REDIS_URL a real Redis to keep the
// limits in (REDIS_URL=redis://localhost:6379/0); -h says so.
package main

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echolimit"
	"github.com/redlimit/redlimit/examples/internal/run"
	"github.com/redlimit/redlimit/keyfunc"
)

// newApp builds the API. Every app instance whose Limiter uses the same
// Redis shares these limits.
func newApp(lim *core.Limiter) http.Handler {
	e := echo.New()
	e.HideBanner = true
	// Behind a load balancer in 10.0.0.0/8: the client is the address it
	// forwards in X-Forwarded-For. Nobody else's header is believed.
	perClient := redlimit.WithKey(keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8")))
	// Password guessing: 5 attempts a minute per client, counted exactly.
	login := core.Limit{Algorithm: core.SlidingLog, Rate: 5, Period: time.Minute}
	// The API, per signed-in user: 10 a second, and a quota of 5000 a day
	// decided with it (a request either denies is charged to neither).
	// Both are announced to clients: X-RateLimit-* and the IETF draft's
	// RateLimit fields.
	daily := core.Limit{Algorithm: core.FixedWindow, Rate: 5000, Period: 24 * time.Hour}
	perUser := echolimit.New(lim, core.PerSecond(10), redlimit.WithName("api"), redlimit.WithAlso(daily),
		redlimit.WithKey(keyfunc.ContextUser(userKey{})), redlimit.WithHeaders(redlimit.HeadersBoth))

	// Every request: 20 a second per client.
	e.Use(echolimit.New(lim, core.PerSecond(20), redlimit.WithName("global"), perClient))
	e.GET("/hello", hello)
	e.POST("/login", signIn, echolimit.New(lim, login, redlimit.WithName("login"), perClient))
	api := e.Group("/api", authenticate, perUser)
	api.GET("/orders", orders)

	// Partners call /partner with an API key; checkAPIKey stores whose it
	// is with c.Set, where echolimit.Key finds it: 100 calls a minute per
	// partner, from whichever address.
	perPartner := echolimit.New(lim, core.PerMinute(100), redlimit.WithName("partner"), redlimit.WithKey(echolimit.Key("partner")))
	e.GET("/partner/stock", stock, checkAPIKey, perPartner)
	return e
}

// userKey is where authenticate puts the signed-in user's ID.
type userKey struct{}

// authenticate lets through requests with "Authorization: Bearer <user>"
// (a stand-in for real authentication), the user in their request's
// context, and answers the others 401.
func authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		user, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || user == "" {
			return echo.NewHTTPError(http.StatusUnauthorized, "sign in first")
		}
		c.SetRequest(r.WithContext(context.WithValue(r.Context(), userKey{}, user)))
		return next(c)
	}
}

// partners maps API keys to partners (a stand-in for a real key store).
var partners = map[string]string{"key-acme": "acme", "key-globex": "globex"}

// checkAPIKey lets through requests with a known X-Api-Key, the partner's
// name stored with c.Set("partner", ...), and answers the others 401.
func checkAPIKey(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		partner, ok := partners[c.Request().Header.Get("X-Api-Key")]
		if !ok {
			return echo.NewHTTPError(http.StatusUnauthorized, "unknown API key")
		}
		c.Set("partner", partner)
		return next(c)
	}
}

func hello(c echo.Context) error  { return c.String(http.StatusOK, "hello\n") }
func signIn(c echo.Context) error { return c.String(http.StatusOK, "welcome\n") }
func orders(c echo.Context) error { return c.String(http.StatusOK, "[]\n") }
func stock(c echo.Context) error  { return c.String(http.StatusOK, "{}\n") }

// command is what -h says.
var command = run.Command{
	Path: "go run ./examples/echo",
	Doc: `A small echo API behind redlimit: 20 requests a second per client address
on every route, 5 login attempts a minute on POST /login, and on
GET /api/orders 10 a second and 5000 a day per signed-in user
(Authorization: Bearer <user>), and on GET /partner/stock 100 a minute per
partner (X-Api-Key: key-acme), the partner found by echolimit.Key in what
c.Set stored. Behind a load balancer in 10.0.0.0/8, the client is the
address it forwards. It prints the curl commands to try it.`,
	Env: []string{run.Addr, run.RedisURL},
}

func main() {
	command.Parse()
	run.Serve("echo", newApp)
}
