package envoyrls_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"github.com/alicebob/miniredis/v2"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/redlimit/redlimit/core"
	"github.com/redlimit/redlimit/envoyrls"
)

// Serve Envoy's rate limit service on gRPC, with a configuration in the
// reference server's format, and ask it as Envoy does.
func ExampleServer() {
	mr, err := miniredis.Run() // an embedded Redis; give yours
	if err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	lim := core.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}))

	config, err := envoyrls.ParseConfig([]envoyrls.File{{Name: "login.yaml", Data: []byte(`
domain: api
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 2
`)}}, envoyrls.ConfigOptions{})
	if err != nil {
		log.Fatal(err)
	}
	srv, err := envoyrls.New(lim, config, envoyrls.Options{})
	if err != nil {
		log.Fatal(err)
	}
	gs := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(gs, srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go gs.Serve(ln)
	defer gs.Stop()

	// Envoy's side: its rate limit filter sends the client's address.
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	client := rlsv3.NewRateLimitServiceClient(cc)
	for range 3 {
		resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{
			Domain: "api",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{
				Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "192.0.2.1"}},
			}},
		})
		if err != nil {
			log.Fatal(err)
		}
		st := resp.GetStatuses()[0]
		fmt.Println(resp.GetOverallCode(), st.GetCurrentLimit().GetRequestsPerUnit(), st.GetCurrentLimit().GetUnit(), st.GetLimitRemaining())
	}
	// Output:
	// OK 2 MINUTE 1
	// OK 2 MINUTE 0
	// OVER_LIMIT 2 MINUTE 0
}
