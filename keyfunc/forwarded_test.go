package keyfunc_test

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/keyfunc"
)

// TestForwarded: with UseForwarded, the for= values of Forwarded are
// walked from the right like X-Forwarded-For, parsed as RFC 7239 says,
// and a for= that is not an address stops the walk at the last address.
func TestForwarded(t *testing.T) {
	t.Parallel()
	proxies := keyfunc.TrustProxies("10.0.0.0/8", "2001:db8:ffff::/48")
	ip := keyfunc.IP(proxies, keyfunc.UseForwarded())
	fwd := func(lines ...string) *http.Request {
		var headers []string
		for _, l := range lines {
			headers = append(headers, "Forwarded", l)
		}
		return request("10.0.0.1:1", headers...)
	}
	const peer = "ip:10.0.0.1"
	tests := []struct {
		name string
		f    keyfunc.Func
		r    *http.Request
		want string
	}{
		// Only when asked, only from trusted peers, and instead of XFF.
		{"not read without the option", keyfunc.IP(proxies), fwd("for=198.51.100.1"), peer},
		{"not read from an untrusted peer", ip, request("203.0.113.7:1", "Forwarded", "for=198.51.100.1"), "ip:203.0.113.7"},
		{"XFF not read with the option", ip, request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.1"), peer},
		{"XFF ignored beside Forwarded", ip,
			request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.9", "Forwarded", "for=198.51.100.1"), "ip:198.51.100.1"},
		{"TrustHeader first", keyfunc.IP(proxies, keyfunc.UseForwarded(), keyfunc.TrustHeader("X-Real-IP")),
			request("10.0.0.1:1", "X-Real-IP", "198.51.100.2", "Forwarded", "for=198.51.100.1"), "ip:198.51.100.2"},
		{"TrustHeader invalid: Forwarded", keyfunc.IP(proxies, keyfunc.UseForwarded(), keyfunc.TrustHeader("X-Real-IP")),
			request("10.0.0.1:1", "X-Real-IP", "nonsense", "X-Forwarded-For", "198.51.100.9", "Forwarded", "for=198.51.100.1"), "ip:198.51.100.1"},

		// Syntax.
		{"token", ip, fwd("for=198.51.100.1"), "ip:198.51.100.1"},
		{"other parameters", ip, fwd("proto=https;for=198.51.100.1;by=10.0.0.1;host=example.com"), "ip:198.51.100.1"},
		{"names in any case", ip, fwd("For=198.51.100.1"), "ip:198.51.100.1"},
		{"names in capitals", ip, fwd("BY=10.0.0.1;FOR=198.51.100.1"), "ip:198.51.100.1"},
		{"quoted", ip, fwd(`for="198.51.100.1"`), "ip:198.51.100.1"},
		{"quoted with a port", ip, fwd(`for="198.51.100.1:4711"`), "ip:198.51.100.1"},
		{"unquoted with a port", ip, fwd(`for=198.51.100.1:4711`), "ip:198.51.100.1"},
		{"obfuscated port", ip, fwd(`for="198.51.100.1:_p1"`), "ip:198.51.100.1"},
		{"IPv6 in brackets with a port", ip, fwd(`for="[2001:db8:1:2::9]:4711"`), "ip:2001:db8:1:2::/64"},
		{"IPv6 in brackets", ip, fwd(`for="[2001:db8:1:2::9]"`), "ip:2001:db8:1:2::/64"},
		{"IPv6 without brackets", ip, fwd(`for="2001:db8:1:2::9"`), "ip:2001:db8:1:2::/64"},
		{"IPv6 with an obfuscated port", ip, fwd(`for="[2001:db8:1:2::9]:_x-1.y"`), "ip:2001:db8:1:2::/64"},
		{"IPv4-mapped IPv6", ip, fwd(`for="[::ffff:198.51.100.1]"`), "ip:198.51.100.1"},
		{"escapes", ip, fwd(`for="198.51.100.\1"`), "ip:198.51.100.1"},
		{"escapes in brackets", ip, fwd(`for="[2001:db8:1:2::\9]:47\11"`), "ip:2001:db8:1:2::/64"},
		{"spaces around elements and pairs", ip, fwd(" for=198.51.100.1 ; proto=https ,\tfor=10.0.0.5\t"), "ip:198.51.100.1"},
		{"empty elements skipped", ip, fwd(", ,for=198.51.100.1, ,", ""), "ip:198.51.100.1"},
		{"empty pairs skipped", ip, fwd(";;for=198.51.100.1;"), "ip:198.51.100.1"},

		// The walk.
		{"client's forged elements left of the real one", ip,
			fwd("for=1.1.1.1, for=2.2.2.2, for=198.51.100.1, for=10.9.9.9"), "ip:198.51.100.1"},
		{"several lines, walked from the last", ip, fwd("for=1.1.1.1", "for=198.51.100.1, for=10.0.0.5"), "ip:198.51.100.1"},
		{"on to an earlier line past trusted hops", ip, fwd("for=1.1.1.1, for=198.51.100.1", "for=10.0.0.5", `for="[2001:db8:ffff::1]"`), "ip:198.51.100.1"},
		{"every hop trusted: the leftmost", ip, fwd("for=10.0.0.9", "for=10.0.0.5"), "ip:10.0.0.9"},
		{"many forged lines", ip, fwd(append(slices.Repeat([]string{"for=6.6.6.6, for=10.0.0.9", `for="`, "for=unknown"}, 30),
			"for=198.51.100.1", "for=10.0.0.5")...), "ip:198.51.100.1"},
		{"no header: the peer", ip, fwd(), peer},

		// What is not an address stops the walk at the last address.
		{"unknown", ip, fwd("for=unknown"), peer},
		{"unknown behind a trusted hop", ip, fwd("for=198.51.100.1, for=unknown, for=10.0.0.5"), "ip:10.0.0.5"},
		{"obfuscated", ip, fwd("for=_hidden"), peer},
		{"obfuscated, client value left of it", ip, fwd("for=198.51.100.1, for=_hidden"), peer},
		{"garbage", ip, fwd("for=nonsense"), peer},
		{"empty value", ip, fwd(`for=""`), peer},
		{"no value", ip, fwd(`for=`), peer},
		{"no for=", ip, fwd("proto=https;by=10.0.0.1"), peer},
		{"the proxy's element has no for=", ip, fwd("for=198.51.100.1, proto=https;by=10.0.0.1"), peer},
		{"a bare word", ip, fwd("198.51.100.1"), peer},
		{"IPv4 in brackets", ip, fwd(`for="[198.51.100.1]"`), peer},
		{"port too long", ip, fwd(`for="198.51.100.1:123456"`), peer},
		{"port not a number", ip, fwd(`for="198.51.100.1:http"`), peer},
		{"empty port", ip, fwd(`for="198.51.100.1:"`), peer},
		{"bracket unclosed", ip, fwd(`for="[2001:db8::1"`), peer},
		{"text after the bracket", ip, fwd(`for="[2001:db8::1]x"`), peer},
		{"text after a quoted value", ip, fwd(`for="198.51.100.1"x`), peer},
		{"text after a token", ip, fwd(`for=198.51.100.1 x`), peer},
		{"unclosed quote", ip, fwd(`for="198.51.100.1`), peer},
		{"control character", ip, fwd("for=\"198.51.100.1\x01\""), peer},

		// Injection, as a client would try it.
		{"duplicate for=", ip, fwd("for=198.51.100.1;for=6.6.6.6"), peer},
		{"duplicate for= in another case", ip, fwd("for=198.51.100.1;FOR=6.6.6.6"), peer},
		{"duplicate parameter", ip, fwd("proto=http;proto=https;for=198.51.100.1"), peer},
		{"16 parameters", ip, fwd(manyPairs(15) + ";for=198.51.100.1"), "ip:198.51.100.1"},
		{"17 parameters", ip, fwd(manyPairs(16) + ";for=198.51.100.1"), peer},
		{"quoted comma is no separator", ip, fwd(`for="6.6.6.6, for=198.51.100.1"`), peer},
		{"quoted semicolon is no separator", ip, fwd(`for="198.51.100.1;for=6.6.6.6"`), peer},
		{"escaped quote is no end", ip, fwd(`for="6.6.6.6\", for=198.51.100.1"`), peer},
		{"client's unclosed quote before the proxy's element", ip, fwd(`for="6.6.6.6, for=198.51.100.7`), "ip:198.51.100.7"},
		{"client's stray quote before the proxy's element", ip, fwd(`for=6.6.6.6", for=198.51.100.7`), "ip:198.51.100.7"},
		{"client's escaped quote before the proxy's element", ip, fwd(`by="x\", for=6.6.6.6", for=198.51.100.7`), "ip:198.51.100.7"},
		{"an open quote does not reach the next line", ip, fwd(`for="\`, `for="[2001:db8:5:6::7]:4711"`), "ip:2001:db8:5:6::/64"},
		{"unclosed quote in the last element", ip, fwd(`for=198.51.100.7, for="6.6.6.6`), peer},
	}
	for _, tt := range tests {
		got, err := tt.f(tt.r)
		if err != nil || got != tt.want {
			t.Errorf("%s: %q: got %q, %v; want %q", tt.name, tt.r.Header.Values("Forwarded"), got, err, tt.want)
		}
	}
}

// manyPairs returns n distinct Forwarded parameters.
func manyPairs(n int) string {
	pairs := make([]string, n)
	for i := range pairs {
		pairs[i] = fmt.Sprintf("x%d=%d", i, i)
	}
	return strings.Join(pairs, ";")
}

// viaForwardingProxy returns the request a trusted proxy at 10.0.0.1
// sends on, having received lines of Forwarded from client (and a forged
// X-Forwarded-For): it keeps them and appends element, which names the
// client, on a new line or, with sameLine, to the last line after a comma.
func viaForwardingProxy(element string, sameLine bool, lines ...string) *http.Request {
	r := request("10.0.0.1:40000", "X-Forwarded-For", "6.6.6.99")
	for _, l := range lines {
		r.Header.Add("Forwarded", l)
	}
	if n := len(r.Header["Forwarded"]); sameLine && n > 0 {
		r.Header["Forwarded"][n-1] += ", " + element
	} else {
		r.Header.Add("Forwarded", element)
	}
	return r
}

// forwardedForgeries are Forwarded lines a client might send to choose
// its key: values of its choice, trusted addresses, values that are not
// addresses, and text meant to break the parse of what its proxy appends.
var forwardedForgeries = [][]string{
	nil,
	{""},
	{"for=6.6.6.1"},
	{"for=6.6.6.2, for=6.6.6.3"},
	{"for=6.6.6.4", "for=6.6.6.5"},
	{"for=10.0.0.9"},
	{"for=10.0.0.9, for=10.0.0.8"},
	{`for="[2001:db8:66::1]:80"`},
	{"for=unknown"},
	{"for=_hidden"},
	{"garbage"},
	{",,,"},
	{";"},
	{"=;=,="},
	{"proto=https"},
	{"for=6.6.6.6;for=6.6.6.7"},
	{"for=6.6.6.6;"},
	{"for=6.6.6.6,"},
	{"for=6.6.6.6;by="},
	{`for="6.6.6.6`},
	{`for="6.6.6.6, for=6.6.6.7`},
	{`"`},
	{`""`},
	{`"""`},
	{`\`},
	{`\"`},
	{`for="\`},
	{`for="\"`},
	{`for="a\\`},
	{`for="a\\"`},
	{`for="a\\\"`},
	{`for=6.6.6.6"`},
	{`for=6.6.6.6\`},
	{`by="x\", for=6.6.6.6"`},
	{`for="6.6.6.6;for=6.6.6.7"`},
	{`for="6.6.6.6", for="`},
	{`for=[`},
	{`for="[`},
	{`for="[2001:db8:66::2`},
	{"for=6.6.6.6\t"},
	{"\t"},
	{"for=6.6.6.8", `for="6.6.6.9`},
	{`FOR="6.6.6.10";For=6.6.6.11`},
}

// TestForwardedAppendingProxy attacks UseForwarded as a client would
// behind a trusted proxy that appends to Forwarded: whatever the client
// writes into it, in as many lines as it likes, every request is keyed by
// the client's real address.
func TestForwardedAppendingProxy(t *testing.T) {
	t.Parallel()
	forgeries := forwardedForgeries
	for i := 0; i < 100; i++ {
		forgeries = append(forgeries, []string{fmt.Sprintf("for=6.7.%d.%d", i/10, i%10)})
	}
	ip := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.UseForwarded())
	for _, client := range []struct {
		key      string
		elements []string // as a proxy might append them
	}{
		{"ip:198.51.100.7", []string{
			"for=198.51.100.7", `for="198.51.100.7:4711"`, "for=198.51.100.7;proto=https;by=10.0.0.1",
			`proto=https;For="198.51.100.7";by="_lb"`,
		}},
		{"ip:2001:db8:5:6::/64", []string{
			`for="[2001:db8:5:6::7]"`, `for="[2001:db8:5:6::7]:4711"`, `for="[2001:db8:5:6::7]:_p";proto=http`,
		}},
	} {
		for _, element := range client.elements {
			for _, sameLine := range []bool{false, true} {
				keys := map[string][]string{}
				for _, lines := range forgeries {
					r := viaForwardingProxy(element, sameLine, lines...)
					key, err := ip(r)
					if err != nil {
						key = "error: " + err.Error()
					}
					keys[key] = append(keys[key], fmt.Sprintf("%q", r.Header.Values("Forwarded")))
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
				t.Errorf("proxy appending %s (same line: %v): %d keys, want 1 (%s); for example %s",
					element, sameLine, len(keys), client.key, strings.Join(wrong, ", "))
			}
		}
	}
}

// FuzzForwardedAppended: whatever two Forwarded lines a client sends,
// once a trusted proxy has appended an element naming the client, on a
// new line or after a comma on the last, the key is the client's address.
func FuzzForwardedAppended(f *testing.F) {
	for _, lines := range forwardedForgeries {
		var a, b string
		if len(lines) > 0 {
			a = lines[0]
		}
		if len(lines) > 1 {
			b = lines[1]
		}
		f.Add(a, b, false, false)
		f.Add(a, b, true, true)
	}
	ip := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"), keyfunc.UseForwarded())
	f.Fuzz(func(t *testing.T, line1, line2 string, sameLine, v6 bool) {
		element, want := "for=198.51.100.7;proto=https", "ip:198.51.100.7"
		if v6 {
			element, want = `for="[2001:db8:5:6::7]:4711"`, "ip:2001:db8:5:6::/64"
		}
		r := viaForwardingProxy(element, sameLine, line1, line2)
		if key, err := ip(r); err != nil || key != want {
			t.Fatalf("client sent Forwarded %q, %q: key %q, %v; want %s", line1, line2, key, err, want)
		}
	})
}

// FuzzForwarded: whatever a peer sends in Forwarded, IP never panics and
// returns an "ip:" or "unix:" key or an ErrNoKey error; from an untrusted
// peer, the header never changes the key.
func FuzzForwarded(f *testing.F) {
	for _, seed := range [][2]string{
		{"10.0.0.1:1", "for=198.51.100.1"},
		{"203.0.113.7:1", "for=198.51.100.1"},
		{"@", `for="[2001:db8::1]:4711", for=10.0.0.2`},
		{"", `for=unknown;by="\"", ,for="`},
		{"pipe", "for=1.2.3.4"},
	} {
		f.Add(seed[0], seed[1])
	}
	trusted := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8", "2001:db8::/32"), keyfunc.TrustUnixSocket(), keyfunc.UseForwarded())
	untrusted := keyfunc.IP(keyfunc.UseForwarded())
	f.Fuzz(func(t *testing.T, remote, forwarded string) {
		r := request(remote, "Forwarded", forwarded)
		key, err := trusted(r)
		if err != nil && !errors.Is(err, keyfunc.ErrNoKey) {
			t.Fatalf("error %v does not wrap ErrNoKey", err)
		}
		if err == nil && !strings.HasPrefix(key, "ip:") && key != keyfunc.UnixSocketKey {
			t.Fatalf("key %q", key)
		}
		bare, errBare := untrusted(request(remote))
		with, errWith := untrusted(r)
		if bare != with || (errBare == nil) != (errWith == nil) {
			t.Fatalf("untrusted peer %q: Forwarded changed the key from %q to %q", remote, bare, with)
		}
	})
}

// TestForwardedWalksLikeXFF: the same chain of hops, written as
// X-Forwarded-For entries or as Forwarded for= values, gives the same key.
func TestForwardedWalksLikeXFF(t *testing.T) {
	t.Parallel()
	proxies := keyfunc.TrustProxies("10.0.0.0/8", "2001:db8:ffff::/48")
	xff := keyfunc.IP(proxies)
	fwd := keyfunc.IP(proxies, keyfunc.UseForwarded())
	hops := []struct{ xff, forwarded string }{
		{"198.51.100.1", "for=198.51.100.1"},
		{"198.51.100.2:4711", `for="198.51.100.2:4711"`},
		{"10.0.0.5", "for=10.0.0.5"},
		{"10.0.0.9:80", "for=10.0.0.9:80"},
		{"2001:db8:1:2::9", `for="[2001:db8:1:2::9]"`},
		{"[2001:db8:ffff::1]:443", `for="[2001:db8:ffff::1]:443"`},
		{"garbage", "for=unknown"},
	}
	var chains [][]int
	for a := range hops {
		chains = append(chains, []int{a})
		for b := range hops {
			chains = append(chains, []int{a, b})
			for c := range hops {
				chains = append(chains, []int{a, b, c})
			}
		}
	}
	for _, chain := range chains {
		var x, f []string
		for _, i := range chain {
			x, f = append(x, hops[i].xff), append(f, hops[i].forwarded)
		}
		want, err1 := xff(request("10.0.0.1:1", "X-Forwarded-For", strings.Join(x, ", ")))
		got, err2 := fwd(request("10.0.0.1:1", "Forwarded", strings.Join(f, ", ")))
		if err1 != nil || err2 != nil || got != want {
			t.Errorf("chain %q: Forwarded gave %q, %v; X-Forwarded-For %q, %v", x, got, err2, want, err1)
		}
	}
}
