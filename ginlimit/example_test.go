package ginlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

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
