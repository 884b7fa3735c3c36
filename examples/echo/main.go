// Command echo is a small echo API behind redlimit: a limit for every route
// per client address, and a stricter one on POST /login.
//
//	go run ./examples/echo            # on localhost:8080, limits in embedded Redis
//	curl -i localhost:8080/hello
//
// ADDR sets the address to listen on, REDIS_URL a real Redis to keep the
// limits in (REDIS_URL=redis://localhost:6379/0); -h says so.
package main

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echolimit"
	"github.com/redlimit/redlimit/examples/internal/run"
)

// newApp builds the API. lim decides; every app instance sharing the Redis
// shares these limits.
func newApp(lim *core.Limiter) http.Handler {
	e := echo.New()
	e.HideBanner = true
	// Per client address: 10 requests a second (bursts up to 10) and,
	// decided together with it, a quota of 1000 an hour. A request either
	// limit denies is charged to neither.
	e.Use(echolimit.New(lim, core.PerSecond(10), redlimit.WithName("api"), redlimit.WithAlso(hourly)))
	e.GET("/hello", func(c echo.Context) error { return c.String(http.StatusOK, "hello\n") })
	// Password guessing: 3 attempts a minute, counted exactly.
	login := core.Limit{Algorithm: core.SlidingLog, Rate: 3, Period: time.Minute}
	e.POST("/login", func(c echo.Context) error { return c.String(http.StatusOK, "welcome\n") },
		echolimit.New(lim, login, redlimit.WithName("login")))
	return e
}

// hourly is the API's quota: 1000 requests an hour, in fixed windows.
var hourly = core.Limit{Algorithm: core.FixedWindow, Rate: 1000, Period: time.Hour}

// command is what -h says.
var command = run.Command{
	Path: "go run ./examples/echo",
	Doc: `A small echo API behind redlimit. Per client address: 10 requests a second
and 1000 an hour on every route, and 3 login attempts a minute on
POST /login. It prints the curl commands to try it.`,
	Env: []string{run.Addr, run.RedisURL},
}

func main() {
	command.Parse()
	run.Serve("echo", newApp)
}
