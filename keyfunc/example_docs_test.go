package keyfunc_test

// Examples that docs/keys.md quotes.

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/redlimit/redlimit/keyfunc"
)

func ExampleIPv6Prefix() {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "[2001:db8:1:2::99]:443"
	for _, ip := range []keyfunc.Func{keyfunc.IP(), keyfunc.IP(keyfunc.IPv6Prefix(48)), keyfunc.IP(keyfunc.IPv6Prefix(128))} {
		key, _ := ip(r)
		fmt.Println(key)
	}

	r.RemoteAddr = "[::ffff:203.0.113.7]:443" // IPv4-mapped IPv6 counts as IPv4
	key, _ := keyfunc.IP()(r)
	fmt.Println(key)
	// Output:
	// ip:2001:db8:1:2::/64
	// ip:2001:db8:1::/48
	// ip:2001:db8:1:2::99
	// ip:203.0.113.7
}

func ExampleJoin() {
	key := keyfunc.Join(keyfunc.Route(), keyfunc.IP())

	mux := http.NewServeMux() // sets r.Pattern, which Route reads
	mux.HandleFunc("POST /users/{id}", func(w http.ResponseWriter, r *http.Request) {
		k, _ := key(r)
		fmt.Println(k)
	})
	for _, path := range []string{"/users/1", "/users/2"} {
		r := httptest.NewRequest("POST", path, nil)
		r.RemoteAddr = "203.0.113.7:51000"
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	// Output:
	// route:POST /users/{id}|ip:203.0.113.7
	// route:POST /users/{id}|ip:203.0.113.7
}

func ExampleHeader() {
	apiKey := keyfunc.Header("X-Api-Key")

	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Api-Key", "k-123")
	key, _ := apiKey(r)
	fmt.Println(key)

	_, err := apiKey(httptest.NewRequest("GET", "/", nil)) // no header: no key
	fmt.Println(errors.Is(err, keyfunc.ErrNoKey))
	// Output:
	// header:X-Api-Key:k-123
	// true
}
