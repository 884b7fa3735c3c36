package echolimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

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
