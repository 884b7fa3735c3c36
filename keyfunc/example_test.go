package keyfunc_test

import (
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
	signedIn := anonymous.WithContext(keyfunc.WithUser(anonymous.Context(), userKey{}, "alice"))

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
