package ginlimit_test

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/ginlimit"
)

func ExampleNew() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	lim := core.New(redis.NewClient(&redis.Options{Addr: m.Addr()}))

	r := gin.New()
	r.Use(ginlimit.New(lim, core.PerSecond(20)))                                    // the whole router
	r.POST("/login", ginlimit.New(lim, core.PerMinute(1)), func(c *gin.Context) {}) // one route

	for i := 0; i < 2; i++ {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/login", nil))
		fmt.Println(strings.TrimSpace(fmt.Sprint(w.Code, " ", w.Body.String())))
	}
	// Output:
	// 200
	// 429 {"error":"rate limit exceeded","retry_after":60}
}

func ExampleKey() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	lim := core.New(redis.NewClient(&redis.Options{Addr: m.Addr()}), core.WithLogger(slog.New(slog.DiscardHandler)))

	r := gin.New()
	r.Use(func(c *gin.Context) { // your authentication: it stores the user's ID
		if user := c.GetHeader("X-User"); user != "" {
			c.Set("user", user)
		}
	})
	r.Use(ginlimit.New(lim, core.PerMinute(1), redlimit.WithKey(ginlimit.Key("user"))))
	r.GET("/orders", func(c *gin.Context) { c.String(http.StatusOK, "[]") })

	for _, user := range []string{"alice", "alice", "bob", ""} {
		req := httptest.NewRequest(http.MethodGet, "/orders", nil)
		req.Header.Set("X-User", user)
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
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
	limit, err := ginlimit.Rules(lim, rules)
	if err != nil {
		panic(err) // a pattern no request can match, a bad limit
	}
	r := gin.New()
	r.Use(limit)
	r.POST("/login", func(c *gin.Context) {})
	r.GET("/users/:id", func(c *gin.Context) {})

	// Once the routes are registered:
	if err := ginlimit.CheckRules(r, rules); err != nil {
		fmt.Println(err)
	}
	// Output: redlimit: invalid rules: rule "GET /reports/{id}": no route of the gin engine matches
}
