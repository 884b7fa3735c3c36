package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/coverage"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/ginlimit"
)

// serveEnv set tells the program it is the build with coverage: serve.
const serveEnv = "REDLIMIT_WALK_SERVE"

// serve sets up a gin app limited to 1 request an hour per client, sends
// a first request (another client's when the walk is of an allowed one,
// the same client's when of a denied one), clears the coverage counters,
// serves the request walked, and writes the counters to GOCOVERDIR. It
// prints the request's status.
func serve(deny bool) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		fail(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(ginlimit.New(core.New(rdb), core.PerHour(1)))
	r.GET("/hello", func(c *gin.Context) { c.String(http.StatusOK, "hello") })
	send := func(peer string) int {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/hello", nil)
		req.RemoteAddr = peer
		r.ServeHTTP(w, req)
		return w.Code
	}
	first := "192.0.2.9:1234"
	if deny {
		first = "192.0.2.1:1234"
	}
	send(first) // loads the script; takes the hour's one request of a denied walk
	if err := coverage.ClearCounters(); err != nil {
		fail(err)
	}
	status := send("192.0.2.1:1234")
	dir := os.Getenv("GOCOVERDIR")
	if err := coverage.WriteMetaDir(dir); err != nil {
		fail(err)
	}
	if err := coverage.WriteCountersDir(dir); err != nil {
		fail(err)
	}
	fmt.Println(status)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "walk:", err)
	os.Exit(1)
}
