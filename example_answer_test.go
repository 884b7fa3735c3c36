package redlimit_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
)

// A framework not built on net/http (fiber, fasthttp) describes its
// request to ServeRequest, which decides it and writes the rate-limit
// fields, and answers a request that may not proceed with the Decision's
// Status, those fields and its Answer. Here the "framework" prints what
// it would send.
func ExampleDecision_Answer() {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		panic(err)
	}
	defer m.Close()
	lim := core.New(redis.NewClient(&redis.Options{Addr: m.Addr()}))
	byPeer := func(q redlimit.Request) (string, error) { // a framework of its own: its own key
		host, _, err := net.SplitHostPort(q.Peer)
		return host, err
	}
	p, err := redlimit.NewPolicy(lim, core.PerMinute(1), redlimit.WithRequestKey(byPeer))
	if err != nil {
		panic(err)
	}

	for range 2 {
		q := redlimit.Request{Context: context.Background(), Method: "GET", Route: "/hello", Path: "/hello", Peer: "192.0.2.1:4711"}
		fields := map[string][]string{}
		d := redlimit.ServeRequest(p, q, fields, func() int {
			fmt.Println("200 hello")
			return http.StatusOK
		})
		if d.Allowed() {
			continue
		}
		contentType, body := d.Answer()
		fmt.Println(d.Status, contentType)
		for _, name := range slices.Sorted(maps.Keys(fields)) {
			fmt.Printf("%s: %s\n", name, fields[name][0])
		}
		fmt.Print(string(body))
	}
	// Output:
	// 200 hello
	// 429 application/json; charset=utf-8
	// retry-after: 60
	// x-ratelimit-limit: 1
	// x-ratelimit-remaining: 0
	// x-ratelimit-reset: 60
	// {"error":"rate limit exceeded","retry_after":60}
}
