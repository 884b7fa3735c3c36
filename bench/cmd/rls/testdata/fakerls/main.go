// Command fakerls stands in for both servers in the tests of cmd/rls: it
// takes redlimit-rls's flags, or the reference's environment (GRPC_HOST,
// GRPC_PORT, and DEBUG_HOST, DEBUG_PORT for its /stats), and answers every
// ShouldRateLimit with OK, without Redis.
package main

import (
	"context"
	"expvar"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

type ok struct {
	pb.UnimplementedRateLimitServiceServer
}

func (ok) ShouldRateLimit(context.Context, *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}, nil
}

func main() {
	flag.String("config", "", "")
	flag.String("redis", "", "")
	addr := flag.String("grpc", "", "")
	flag.String("http", ":8080", "")
	flag.Parse()
	if *addr == "" {
		*addr = net.JoinHostPort(os.Getenv("GRPC_HOST"), os.Getenv("GRPC_PORT"))
	}
	if port := os.Getenv("DEBUG_PORT"); port != "" {
		// The reference's /stats: "name: value" lines of expvar.
		http.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
			expvar.Do(func(kv expvar.KeyValue) { io.WriteString(w, fmt.Sprintf("%s: %s\n", kv.Key, kv.Value)) })
		})
		go func() { log.Print(http.ListenAndServe(net.JoinHostPort(os.Getenv("DEBUG_HOST"), port), nil)) }()
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(gs, ok{})
	log.Fatal(gs.Serve(ln))
}
