package redlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"

	"github.com/redlimit/redlimit"
	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/nethttp"
)

// An AI API sold as 60 requests and 40 000 tokens a minute per API key:
// each request reserves an estimate of its tokens and is charged what the
// model reports after it, both limits decided as one.
func ExampleWithBudget() {
	rdb, m := docsRedis()
	defer m.Close()
	defer rdb.Close()
	lim := core.New(rdb)

	tokens, err := core.ParseLimits("40000/m unit=tokens")
	if err != nil {
		panic(err)
	}
	budget := redlimit.WithBudget(redlimit.Budget{
		Limits: tokens,
		// Reserve what a typical request uses; the settlement corrects it.
		Estimate: func(r *http.Request) int { return 1000 },
		// The handler reports what the model used.
		Cost: func(r *http.Request, status int, h http.Header) int {
			n, err := strconv.Atoi(h.Get("X-Tokens-Used"))
			if err != nil {
				return -1 // unknown: the estimate stands (and is logged)
			}
			return n
		},
		MaxCost:  32000, // no request is charged more
		TakeRest: true,  // the last tokens of a minute may be used
	})
	api := nethttp.New(lim, core.PerMinute(60), redlimit.WithName("api"), budget,
		redlimit.WithHeaders(redlimit.HeadersDraft))(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Tokens-Used", "230") // from the model's answer
			fmt.Fprintln(w, "ok")
		}))

	for i := 0; i < 2; i++ {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "/v1/chat", nil)
		api.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
		fmt.Println(w.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "api";q=60;w=60, "api-1m-tokens";q=40000;qu="tokens";w=60
	// "api";r=59;t=1, "api-1m-tokens";r=39000;t=1
	// 200 "api";q=60;w=60, "api-1m-tokens";q=40000;qu="tokens";w=60
	// "api";r=58;t=1, "api-1m-tokens";r=38770;t=1
}

// A streaming answer (server-sent events) reports its tokens to the
// request's Usage as it produces them: the request is settled at their sum
// when the handler returns, and a client that leaves mid-stream is charged
// what was produced until the handler noticed.
func ExampleUsage() {
	rdb, m := docsRedis()
	defer m.Close()
	defer rdb.Close()
	lim := core.New(rdb)

	tokens, err := core.ParseLimits("40000/m unit=tokens")
	if err != nil {
		panic(err)
	}
	budget := redlimit.WithBudget(redlimit.Budget{Limits: tokens, Estimate: func(*http.Request) int { return 500 }})
	stream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		usage := redlimit.UsageFrom(r.Context())
		for _, chunk := range []string{"Hello", ", ", "world"} {
			if r.Context().Err() != nil {
				return // the client left: charged what was produced
			}
			fmt.Fprintf(w, "data: %s\n\n", chunk)
			http.NewResponseController(w).Flush()
			usage.Add("tokens", 100) // what the model said this chunk cost
		}
	})
	api := nethttp.New(lim, core.PerMinute(60), redlimit.WithName("chat"), budget,
		redlimit.WithHeaders(redlimit.HeadersDraft))(stream)

	for i := 0; i < 2; i++ {
		w := httptest.NewRecorder()
		api.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat", nil))
		fmt.Println(strings.Count(w.Body.String(), "data:"), w.Header().Get("RateLimit"))
	}
	// Output:
	// 3 "chat";r=59;t=1, "chat-1m-tokens";r=39500;t=1
	// 3 "chat";r=58;t=1, "chat-1m-tokens";r=39200;t=1
}
