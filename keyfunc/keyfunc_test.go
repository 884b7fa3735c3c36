package keyfunc_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/keyfunc"
)

func request(remote string, headers ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	return r
}

func TestIP(t *testing.T) {
	t.Parallel()
	proxies := keyfunc.TrustProxies("10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.1")
	tests := []struct {
		name string
		f    keyfunc.Func
		r    *http.Request
		want string
	}{
		{"peer v4", keyfunc.IP(), request("203.0.113.7:5555"), "ip:203.0.113.7"},
		{"peer without port", keyfunc.IP(), request("203.0.113.7"), "ip:203.0.113.7"},
		{"forged XFF ignored by default", keyfunc.IP(), request("203.0.113.7:1", "X-Forwarded-For", "198.51.100.1"), "ip:203.0.113.7"},
		{"forged X-Real-IP ignored by default", keyfunc.IP(keyfunc.TrustHeader("X-Real-IP")), request("203.0.113.7:1", "X-Real-IP", "198.51.100.1"), "ip:203.0.113.7"},
		{"XFF from an untrusted peer ignored", keyfunc.IP(proxies), request("203.0.113.7:1", "X-Forwarded-For", "198.51.100.1"), "ip:203.0.113.7"},
		{"XFF through a trusted proxy", keyfunc.IP(proxies), request("10.1.2.3:1", "X-Forwarded-For", "198.51.100.1"), "ip:198.51.100.1"},
		{"client's forged entries left of the real one", keyfunc.IP(proxies),
			request("10.1.2.3:1", "X-Forwarded-For", "1.1.1.1, 2.2.2.2, 198.51.100.1, 10.9.9.9"), "ip:198.51.100.1"},
		{"several XFF lines, walked from the last", keyfunc.IP(proxies),
			request("10.1.2.3:1", "X-Forwarded-For", "1.1.1.1", "X-Forwarded-For", "198.51.100.1, 10.0.0.5"), "ip:198.51.100.1"},
		{"every hop trusted: the leftmost", keyfunc.IP(proxies), request("10.1.2.3:1", "X-Forwarded-For", "10.0.0.9, 192.0.2.1"), "ip:10.0.0.9"},
		{"garbage from a trusted hop stops the walk", keyfunc.IP(proxies),
			request("10.1.2.3:1", "X-Forwarded-For", "198.51.100.1, not-an-ip, 10.0.0.5"), "ip:10.0.0.5"},
		{"XFF entries with ports and brackets", keyfunc.IP(proxies), request("10.1.2.3:1", "X-Forwarded-For", "[2001:db8:1:2::9]:443, 10.0.0.5:80"), "ip:2001:db8:1:2::/64"},
		{"trusted single-value header", keyfunc.IP(proxies, keyfunc.TrustHeader("CF-Connecting-IP")),
			request("192.0.2.1:1", "Cf-Connecting-Ip", "198.51.100.2", "X-Forwarded-For", "1.1.1.1"), "ip:198.51.100.2"},
		{"invalid single-value header falls back to XFF", keyfunc.IP(proxies, keyfunc.TrustHeader("X-Real-IP")),
			request("192.0.2.1:1", "X-Real-IP", "nonsense", "X-Forwarded-For", "198.51.100.3"), "ip:198.51.100.3"},
		{"IPv6 grouped by /64", keyfunc.IP(), request("[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:443"), "ip:2001:db8:1:2::/64"},
		{"another address in the same /64", keyfunc.IP(), request("[2001:db8:1:2::1]:443"), "ip:2001:db8:1:2::/64"},
		{"IPv6 /48", keyfunc.IP(keyfunc.IPv6Prefix(48)), request("[2001:db8:1:2::1]:443"), "ip:2001:db8:1::/48"},
		{"IPv6 per address", keyfunc.IP(keyfunc.IPv6Prefix(128)), request("[2001:db8:1:2::1]:443"), "ip:2001:db8:1:2::1"},
		{"IPv6 zone dropped", keyfunc.IP(keyfunc.IPv6Prefix(128)), request("[fe80::1%eth0]:443"), "ip:fe80::1"},
		{"IPv4-mapped IPv6 is IPv4", keyfunc.IP(), request("[::ffff:203.0.113.7]:443"), "ip:203.0.113.7"},
		{"trusted IPv6 proxy", keyfunc.IP(proxies), request("[2001:db8:ffff::1]:443", "X-Forwarded-For", "203.0.113.9"), "ip:203.0.113.9"},
	}
	for _, tt := range tests {
		got, err := tt.f(tt.r)
		if err != nil || got != tt.want {
			t.Errorf("%s: got %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

func TestIPErrors(t *testing.T) {
	t.Parallel()
	for _, remote := range []string{"", "pipe", "203.0.113.7:port", "[::1"} {
		if _, err := keyfunc.IP()(request(remote)); !errors.Is(err, keyfunc.ErrNoKey) {
			t.Errorf("RemoteAddr %q: err %v, want ErrNoKey", remote, err)
		}
	}
	if _, err := keyfunc.ParsePrefixes("10.0.0.0/8", "bogus"); err == nil {
		t.Error("ParsePrefixes accepted bogus")
	}
	for name, f := range map[string]func(){
		"TrustProxies": func() { keyfunc.TrustProxies("10.0.0.0/33") },
		"IPv6Prefix":   func() { keyfunc.IPv6Prefix(0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with bad input did not panic", name)
				}
			}()
			f()
		}()
	}
}

type userKey struct{}

func TestOtherFuncs(t *testing.T) {
	t.Parallel()
	r := request("203.0.113.7:1", "X-Api-Key", "k1")
	r = r.WithContext(keyfunc.WithUser(r.Context(), userKey{}, "42"))
	anon := request("203.0.113.8:1")
	routed := request("203.0.113.7:1")
	routed.Pattern = "/users/{id}"
	muxRouted := request("203.0.113.7:1")
	muxRouted.Pattern = "GET /users/{id}"

	tests := []struct {
		name string
		f    keyfunc.Func
		r    *http.Request
		want string // "" means ErrNoKey
	}{
		{"header", keyfunc.Header("x-api-key"), r, "header:X-Api-Key:k1"},
		{"missing header", keyfunc.Header("X-Api-Key"), anon, ""},
		{"context user", keyfunc.ContextUser(userKey{}), r, "user:42"},
		{"anonymous", keyfunc.ContextUser(userKey{}), anon, ""},
		{"user func", keyfunc.User(func(*http.Request) (string, bool) { return "", true }), r, ""},
		{"route", keyfunc.Route(), routed, "route:GET /users/{id}"},
		{"route with the method in the pattern", keyfunc.Route(), muxRouted, "route:GET /users/{id}"},
		{"no route", keyfunc.Route(), anon, "route:GET (unmatched)"},
		{"join", keyfunc.Join(keyfunc.Route(), keyfunc.IP()), routed, "route:GET /users/{id}|ip:203.0.113.7"},
		{"join fails with a part", keyfunc.Join(keyfunc.IP(), keyfunc.Header("X-Api-Key")), anon, ""},
		{"first: user", keyfunc.First(keyfunc.ContextUser(userKey{}), keyfunc.IP()), r, "user:42"},
		{"first: falls back to IP", keyfunc.First(keyfunc.ContextUser(userKey{}), keyfunc.IP()), anon, "ip:203.0.113.8"},
		{"first: all fail", keyfunc.First(keyfunc.ContextUser(userKey{}), keyfunc.Header("X")), anon, ""},
		{"first of nothing", keyfunc.First(), anon, ""},
	}
	for _, tt := range tests {
		got, err := tt.f(tt.r)
		if tt.want == "" {
			if !errors.Is(err, keyfunc.ErrNoKey) {
				t.Errorf("%s: got %q, %v; want an ErrNoKey error", tt.name, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%s: got %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

// TestJoinEscapes: parts that contain the separator cannot be arranged to
// produce another request's key.
func TestJoinEscapes(t *testing.T) {
	t.Parallel()
	h := func(name string) keyfunc.Func { return keyfunc.Header(name) }
	a := request("", "A", "x|header:B:y", "B", "z")
	b := request("", "A", "x", "B", "y|header:B:z")
	ka, _ := keyfunc.Join(h("A"), h("B"))(a)
	kb, _ := keyfunc.Join(h("A"), h("B"))(b)
	if ka == kb {
		t.Fatalf("different requests share the joined key %q", ka)
	}
}

// FuzzIP: whatever a client sends as its address and forwarding headers,
// IP never panics and returns an "ip:" key or an ErrNoKey error; from an
// untrusted peer, the headers never change the key.
func FuzzIP(f *testing.F) {
	for _, seed := range [][3]string{
		{"203.0.113.7:1", "198.51.100.1", ""},
		{"10.0.0.1:1", "1.1.1.1, 198.51.100.1, 10.0.0.9", "198.51.100.2"},
		{"[2001:db8::1]:443", "[2001:db8::2]:80, garbage", "::ffff:1.2.3.4"},
		{"10.0.0.1:1", ",,, , ,", "[::1"},
		{"pipe", "", ""},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	trusted := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8", "2001:db8::/32"), keyfunc.TrustHeader("X-Real-IP"))
	plain := keyfunc.IP()
	f.Fuzz(func(t *testing.T, remote, xff, real string) {
		r := request(remote, "X-Forwarded-For", xff, "X-Real-IP", real)
		for _, ip := range []keyfunc.Func{trusted, plain} {
			key, err := ip(r)
			if err != nil {
				if !errors.Is(err, keyfunc.ErrNoKey) {
					t.Fatalf("error %v does not wrap ErrNoKey", err)
				}
				continue
			}
			if !strings.HasPrefix(key, "ip:") {
				t.Fatalf("key %q", key)
			}
		}
		bare, errBare := plain(request(remote))
		withHeaders, errHeaders := plain(r)
		if bare != withHeaders || (errBare == nil) != (errHeaders == nil) {
			t.Fatalf("untrusted peer %q: headers changed the key from %q to %q", remote, bare, withHeaders)
		}
	})
}
