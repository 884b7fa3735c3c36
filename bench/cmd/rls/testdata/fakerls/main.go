// Command fakerls stands in for redlimit-rls in the tests of cmd/rls: it
// takes the same flags and answers every ShouldRateLimit with OK, without
// Redis.
package main

import (
	"context"
	"flag"
	"log"
	"net"

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
	addr := flag.String("grpc", ":8081", "")
	flag.String("http", ":8080", "")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(gs, ok{})
	log.Fatal(gs.Serve(ln))
}
