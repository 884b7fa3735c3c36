package keyfunc_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/redlimit/redlimit/keyfunc"
)

func ExampleIP() {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "203.0.113.7:51000"
	r.Header.Set("X-Forwarded-For", "198.51.100.1") // anyone can send this

	key, _ := keyfunc.IP()(r)
	fmt.Println(key) // the header is ignored: no proxy is trusted
	// Output: ip:203.0.113.7
}

func ExampleIP_trustedProxies() {
	// Behind a load balancer in 10.0.0.0/8 that appends to X-Forwarded-For.
	ip := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"))

	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.5:40000"
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.1") // the client wrote 6.6.6.6 itself
	key, _ := ip(r)
	fmt.Println(key)
	// Output: ip:198.51.100.1
}

func ExampleFirst() {
	type userKey struct{}
	key := keyfunc.First(keyfunc.ContextUser(userKey{}), keyfunc.IP())

	anonymous := httptest.NewRequest("GET", "/", nil)
	anonymous.RemoteAddr = "[2001:db8:1:2::99]:443"
	signedIn := anonymous.WithContext(context.WithValue(anonymous.Context(), userKey{}, "alice"))

	for _, r := range []*http.Request{anonymous, signedIn} {
		k, _ := key(r)
		fmt.Println(k)
	}
	// Output:
	// ip:2001:db8:1:2::/64
	// user:alice
}

func ExampleTrustHeader() {
	// Behind a proxy in 10.0.0.0/8 that sets X-Real-IP. Whether it replaces
	// the header or appends to it, the last value is the one it set.
	ip := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.TrustHeader("X-Real-IP"))

	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.5:40000"
	r.Header.Add("X-Real-IP", "6.6.6.6")      // sent by the client
	r.Header.Add("X-Real-IP", "198.51.100.1") // appended by the proxy
	key, _ := ip(r)
	fmt.Println(key)
	// Output: ip:198.51.100.1
}

func ExampleUseForwarded() {
	// Behind a proxy in 10.0.0.0/8 that appends to Forwarded (RFC 7239).
	ip := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.UseForwarded())

	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.5:40000"
	// The client sent the first element itself; the proxy appended the second.
	r.Header.Set("Forwarded", `for=6.6.6.6, for="[2001:db8:1:2::99]:4711";proto=https`)
	r.Header.Set("X-Forwarded-For", "6.6.6.7") // not read with UseForwarded
	key, _ := ip(r)
	fmt.Println(key)
	// Output: ip:2001:db8:1:2::/64
}

func ExampleTrustUnixSocket() {
	// net/http reports a peer on a Unix socket, such as a reverse proxy on
	// the same host, as "@" on Linux: it has no address.
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "@"
	r.Header.Set("X-Forwarded-For", "198.51.100.1")

	shared, _ := keyfunc.IP()(r) // one key for every request on the socket
	behind, _ := keyfunc.IP(keyfunc.TrustUnixSocket())(r)
	fmt.Println(shared)
	fmt.Println(behind)
	// Output:
	// unix:
	// ip:198.51.100.1
}
