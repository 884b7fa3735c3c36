// Command gin is a small gin API behind redlimit, as a service behind a
// load balancer would have it: a limit per client address on every
// request, a stricter one on POST /login, on /api a limit per signed-in
// user with a daily quota, and on /partner a limit per partner, keyed by
// what a handler stored with c.Set.
//
//	go run ./examples/gin            # on localhost:8080, limits in embedded Redis
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

	"github.com/gin-gonic/gin"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/examples/internal/run"
	"github.com/redlimit/redlimit/ginlimit"
	"github.com/redlimit/redlimit/keyfunc"
)

// newApp builds the API. Every app instance whose Limiter uses the same
// Redis shares these limits.
func newApp(lim *core.Limiter) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
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
	perUser := ginlimit.New(lim, core.PerSecond(10), redlimit.WithName("api"), redlimit.WithAlso(daily),
		redlimit.WithKey(keyfunc.ContextUser(userKey{})), redlimit.WithHeaders(redlimit.HeadersBoth))

	// Every request: 20 a second per client.
	r.Use(ginlimit.New(lim, core.PerSecond(20), redlimit.WithName("global"), perClient))
	r.GET("/hello", hello)
	r.POST("/login", ginlimit.New(lim, login, redlimit.WithName("login"), perClient), signIn)
	api := r.Group("/api", authenticate, perUser)
	api.GET("/orders", orders)

	// Partners call /partner with an API key; checkAPIKey stores whose it
	// is with c.Set, where ginlimit.Key finds it: 100 calls a minute per
	// partner, from whichever address.
	perPartner := ginlimit.New(lim, core.PerMinute(100), redlimit.WithName("partner"), redlimit.WithKey(ginlimit.Key("partner")))
	r.GET("/partner/stock", checkAPIKey, perPartner, stock)
	return r
}

// userKey is where authenticate puts the signed-in user's ID.
type userKey struct{}

// authenticate lets through requests with "Authorization: Bearer <user>"
// (a stand-in for real authentication), the user in their request's
// context, and answers the others 401.
func authenticate(c *gin.Context) {
	user, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	if !ok || user == "" {
		c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"error": "sign in first"})
		return
	}
	c.Request = c.Request.WithContext(context.WithValue(c.Request.Context(), userKey{}, user))
}

// partners maps API keys to partners (a stand-in for a real key store).
var partners = map[string]string{"key-acme": "acme", "key-globex": "globex"}

// checkAPIKey lets through requests with a known X-Api-Key, the partner's
// name stored with c.Set("partner", ...), and answers the others 401.
func checkAPIKey(c *gin.Context) {
	partner, ok := partners[c.GetHeader("X-Api-Key")]
	if !ok {
		c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"error": "unknown API key"})
		return
	}
	c.Set("partner", partner)
}

func hello(c *gin.Context)  { c.String(http.StatusOK, "hello\n") }
func signIn(c *gin.Context) { c.String(http.StatusOK, "welcome\n") }
func orders(c *gin.Context) { c.String(http.StatusOK, "[]\n") }
func stock(c *gin.Context)  { c.String(http.StatusOK, "{}\n") }

// command is what -h says.
var command = run.Command{
	Path: "go run ./examples/gin",
	Doc: `A small gin API behind redlimit: 20 requests a second per client address
on every route, 5 login attempts a minute on POST /login, and on
GET /api/orders 10 a second and 5000 a day per signed-in user
(Authorization: Bearer <user>), and on GET /partner/stock 100 a minute per
partner (X-Api-Key: key-acme), the partner found by ginlimit.Key in what
c.Set stored. Behind a load balancer in 10.0.0.0/8, the client is the
address it forwards. It prints the curl commands to try it.`,
	Env: []string{run.Addr, run.RedisURL},
}

func main() {
	command.Parse()
	run.Serve("gin", newApp)
}
