package keyfunc_test

import (
	"context"
	"errors"
	"fmt"
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
	tests := []keyCase{
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
	checkKeys(t, tests)
}

func TestIPErrors(t *testing.T) {
	t.Parallel()
	for _, remote := range []string{"pipe", "203.0.113.7:port", "[::1", "@x", "/run/x.sock", " ", "unix:"} {
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
	r = r.WithContext(context.WithValue(r.Context(), userKey{}, "42"))
	anon := request("203.0.113.8:1")
	routed := request("203.0.113.7:1")
	routed.Pattern = "/users/{id}"
	muxRouted := request("203.0.113.7:1")
	muxRouted.Pattern = "GET /users/{id}"

	tests := []keyCase{
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
	checkKeys(t, tests)
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
// IP never panics and returns an "ip:" key, the Unix-socket key or an
// ErrNoKey error; from an untrusted peer, the headers never change the
// key.
func FuzzIP(f *testing.F) {
	for _, seed := range [][3]string{
		{"203.0.113.7:1", "198.51.100.1", ""},
		{"10.0.0.1:1", "1.1.1.1, 198.51.100.1, 10.0.0.9", "198.51.100.2"},
		{"[2001:db8::1]:443", "[2001:db8::2]:80, garbage", "::ffff:1.2.3.4"},
		{"10.0.0.1:1", ",,, , ,", "[::1"},
		{"pipe", "", ""},
		{"@", "198.51.100.1", ""},
		{"", "garbage", "198.51.100.2"},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	trusted := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8", "2001:db8::/32"), keyfunc.TrustHeader("X-Real-IP"))
	unix := keyfunc.IP(keyfunc.TrustUnixSocket(), keyfunc.TrustProxies("10.0.0.0/8"))
	plain := keyfunc.IP()
	f.Fuzz(func(t *testing.T, remote, xff, real string) {
		r := request(remote, "X-Forwarded-For", xff, "X-Real-IP", real)
		for _, ip := range []keyfunc.Func{trusted, unix, plain} {
			key, err := ip(r)
			if err != nil {
				if !errors.Is(err, keyfunc.ErrNoKey) {
					t.Fatalf("error %v does not wrap ErrNoKey", err)
				}
				continue
			}
			if !strings.HasPrefix(key, "ip:") && key != keyfunc.UnixSocketKey {
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

// viaAppendingProxy returns the request a trusted proxy at 10.0.0.1 sends
// on for client, having received the header lines sent from the client: it
// keeps them and appends client's address to header and to X-Forwarded-For,
// on a new line or, with sameLine, to the last line after a comma.
func viaAppendingProxy(client, header string, sameLine bool, sent ...string) *http.Request {
	r := request("10.0.0.1:40000", sent...)
	for _, name := range []string{header, "X-Forwarded-For"} {
		name = http.CanonicalHeaderKey(name)
		if n := len(r.Header[name]); sameLine && n > 0 {
			r.Header[name][n-1] += ", " + client
		} else {
			r.Header[name] = append(r.Header[name], client)
		}
	}
	return r
}

// TestTrustHeaderAppendingProxy attacks TrustHeader as a client would
// behind a trusted proxy that appends to the header instead of replacing
// it: whatever the client writes into the header, in as many lines and
// values as it likes, all its requests share one key, its real address's.
func TestTrustHeaderAppendingProxy(t *testing.T) {
	t.Parallel()
	forgeries := [][]string{
		nil,
		{"6.6.6.1"},
		{"6.6.6.2, 6.6.6.3"},
		{"6.6.6.4", "6.6.6.5"},
		{" 6.6.6.6 "},
		{"\t6.6.6.7\t,\t6.6.6.8\t"},
		{""},
		{"", ""},
		{","},
		{", , ,"},
		{"6.6.6.9,"},
		{"garbage"},
		{"garbage", "6.6.6.10, not an address"},
		{"[2001:db8:66::1]:443"},
		{"2001:db8:66::2, [2001:db8:66::3]"},
		{"10.0.0.9"}, // a trusted proxy's address
		{"198.51.100.7, 6.6.6.11"},
		{"6.6.6.12:80"},
	}
	for i := 0; i < 100; i++ {
		forgeries = append(forgeries, []string{fmt.Sprintf("6.7.%d.%d", i/10, i%10)})
	}
	proxies := keyfunc.TrustProxies("10.0.0.0/8")
	for _, client := range []struct{ addr, key string }{
		{"198.51.100.7", "ip:198.51.100.7"},
		{"2001:db8:5:6::7", "ip:2001:db8:5:6::/64"},
	} {
		for _, header := range []string{"X-Real-IP", "CF-Connecting-IP"} {
			ip := keyfunc.IP(proxies, keyfunc.TrustHeader(header))
			for _, sameLine := range []bool{false, true} {
				keys := map[string][]string{}
				for _, lines := range forgeries {
					for _, withXFF := range []bool{false, true} {
						var sent []string
						for _, v := range lines {
							sent = append(sent, header, v)
						}
						if withXFF {
							sent = append(sent, "X-Forwarded-For", "6.6.6.13")
						}
						r := viaAppendingProxy(client.addr, header, sameLine, sent...)
						key, err := ip(r)
						if err != nil {
							key = "error: " + err.Error()
						}
						keys[key] = append(keys[key], fmt.Sprintf("%q", r.Header.Values(header)))
					}
				}
				if len(keys) == 1 && keys[client.key] != nil {
					continue
				}
				var wrong []string
				for key, sent := range keys {
					if key != client.key && len(wrong) < 3 {
						wrong = append(wrong, fmt.Sprintf("%s gave %q", sent[0], key))
					}
				}
				how := "a new line"
				if sameLine {
					how = "the last line"
				}
				t.Errorf("%s from %s, a proxy appending to %s: %d keys, want 1 (%s); for example %s",
					header, client.addr, how, len(keys), client.key, strings.Join(wrong, ", "))
			}
		}
	}
}

// TestTrustHeaderLastValue: the value the nearest trusted proxy set, the
// last one, counts; when it is not an address, the header is ignored and
// X-Forwarded-For is walked, never an earlier value used.
func TestTrustHeaderLastValue(t *testing.T) {
	t.Parallel()
	ip := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.TrustHeader("X-Real-IP"))
	tests := []struct {
		name    string
		headers []string
		want    string
	}{
		{"one value", []string{"X-Real-IP", "198.51.100.1"}, "ip:198.51.100.1"},
		{"the last of one line", []string{"X-Real-IP", "6.6.6.6, 198.51.100.1"}, "ip:198.51.100.1"},
		{"the last of several lines", []string{"X-Real-IP", "6.6.6.6", "X-Real-IP", "198.51.100.1"}, "ip:198.51.100.1"},
		{"the last of the last line", []string{"X-Real-IP", "6.6.6.6", "X-Real-IP", "6.6.6.7 ,198.51.100.1 "}, "ip:198.51.100.1"},
		{"last value empty: XFF", []string{"X-Real-IP", "6.6.6.6,", "X-Forwarded-For", "198.51.100.2"}, "ip:198.51.100.2"},
		{"last line empty: XFF", []string{"X-Real-IP", "6.6.6.6", "X-Real-IP", "", "X-Forwarded-For", "198.51.100.2"}, "ip:198.51.100.2"},
		{"last value garbage: XFF", []string{"X-Real-IP", "6.6.6.6, garbage", "X-Forwarded-For", "198.51.100.2"}, "ip:198.51.100.2"},
		{"last value garbage, no XFF: the peer", []string{"X-Real-IP", "6.6.6.6, garbage"}, "ip:10.0.0.1"},
	}
	for _, tt := range tests {
		got, err := ip(request("10.0.0.1:1", tt.headers...))
		if err != nil || got != tt.want {
			t.Errorf("%s: got %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
}

// FuzzTrustHeaderAppended: whatever one header line a client sends, once
// an appending trusted proxy has added the client's address, the key is
// that address.
func FuzzTrustHeaderAppended(f *testing.F) {
	for _, seed := range []string{"", "6.6.6.6", "6.6.6.6, 6.6.6.7", " , ,", "garbage", "[::1]:80", "10.0.0.9", "1.2.3.4,"} {
		f.Add(seed, false)
		f.Add(seed, true)
	}
	ip := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.TrustHeader("X-Real-IP"))
	f.Fuzz(func(t *testing.T, sent string, sameLine bool) {
		r := viaAppendingProxy("198.51.100.7", "X-Real-IP", sameLine, "X-Real-IP", sent)
		if key, err := ip(r); err != nil || key != "ip:198.51.100.7" {
			t.Fatalf("client sent X-Real-IP %q: key %q, %v; want ip:198.51.100.7", sent, key, err)
		}
	})
}

// keyCase is one request and the key a Func must give it; "" means an
// ErrNoKey error.
type keyCase struct {
	name string
	f    keyfunc.Func
	r    *http.Request
	want string
}

// checkKeys runs every case.
func checkKeys(t *testing.T, tests []keyCase) {
	t.Helper()
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

// TestIPOf: IPOf keys a peer that is no *http.Request as IP keys a
// request with the same address and fields.
func TestIPOf(t *testing.T) {
	t.Parallel()
	fields := map[string][]string{"x-forwarded-for": {"198.51.100.7"}}
	values := func(name string) []string { return fields[strings.ToLower(name)] }
	tests := []struct {
		name       string
		opts       []keyfunc.IPOption
		remoteAddr string
		unix       bool
		want       string
	}{
		{"peer", nil, "192.0.2.1:1234", false, "ip:192.0.2.1"},
		{"forwarding untrusted", nil, "10.0.0.1:1234", false, "ip:10.0.0.1"},
		{"behind a trusted proxy", []keyfunc.IPOption{keyfunc.TrustProxies("10.0.0.0/8")}, "10.0.0.1:1234", false, "ip:198.51.100.7"},
		{"IPv6 by its /64", nil, "[2001:db8:1:2::7]:1234", false, "ip:2001:db8:1:2::/64"},
		{"unix socket", nil, "@", true, keyfunc.UnixSocketKey},
	}
	for _, tt := range tests {
		got, err := keyfunc.IPOf(tt.opts...)(tt.remoteAddr, tt.unix, values)
		if err != nil || got != tt.want {
			t.Errorf("%s: %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	if _, err := keyfunc.IPOf()("", false, values); !errors.Is(err, keyfunc.ErrNoKey) {
		t.Errorf("no address: %v, want ErrNoKey", err)
	}
}
