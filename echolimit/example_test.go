package echolimit_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/echolimit"
)

func ExampleNew() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	lim := core.New(redis.NewClient(&redis.Options{Addr: m.Addr()}))

	e := echo.New()
	e.Use(echolimit.New(lim, core.PerSecond(20)))                                                      // every route
	e.POST("/login", func(c echo.Context) error { return nil }, echolimit.New(lim, core.PerMinute(1))) // one route

	for i := 0; i < 2; i++ {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/login", nil))
		fmt.Println(strings.TrimSpace(fmt.Sprint(w.Code, " ", w.Header().Get("Retry-After"), " ", w.Body.String())))
	}
	// Output:
	// 200
	// 429 60 {"error":"rate limit exceeded","retry_after":60}
}

func ExampleKey() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	lim := core.New(redis.NewClient(&redis.Options{Addr: m.Addr()}), core.WithLogger(slog.New(slog.DiscardHandler)))

	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // your authentication: it stores the user's ID
		return func(c echo.Context) error {
			if user := c.Request().Header.Get("X-User"); user != "" {
				c.Set("user", user)
			}
			return next(c)
		}
	})
	e.Use(echolimit.New(lim, core.PerMinute(1), redlimit.WithKey(echolimit.Key("user"))))
	e.GET("/orders", func(c echo.Context) error { return c.String(http.StatusOK, "[]") })

	for _, user := range []string{"alice", "alice", "bob", ""} {
		req := httptest.NewRequest(http.MethodGet, "/orders", nil)
		req.Header.Set("X-User", user)
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Printf("%q %d\n", user, w.Code)
	}
	// Output:
	// "alice" 200
	// "alice" 429
	// "bob" 200
	// "" 400
}

func ExampleCheckRules() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	lim := core.New(redis.NewClient(&redis.Options{Addr: m.Addr()}))

	rules := redlimit.Rules{"POST /login": "5/m", "GET /users/{id}": "10/s", "GET /reports/{id}": "1/s"}
	limit, err := echolimit.Rules(lim, rules)
	if err != nil {
		panic(err) // a pattern no request can match, a bad limit
	}
	e := echo.New()
	e.Use(limit)
	e.POST("/login", func(c echo.Context) error { return nil })
	e.GET("/users/:id", func(c echo.Context) error { return nil })

	// Once the routes are registered:
	if err := echolimit.CheckRules(e, rules); err != nil {
		fmt.Println(err)
	}
	// Output: redlimit: invalid rules: rule "GET /reports/{id}": no route of the echo server matches
}
