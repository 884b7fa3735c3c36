package keyfunc_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/keyfunc"
)

// TestTrustProxiesMapped: an IPv4-mapped IPv6 prefix or address names the
// IPv4 proxies it maps, as IP unmaps the addresses it reads.
func TestTrustProxiesMapped(t *testing.T) {
	t.Parallel()
	for _, trusted := range []string{"::ffff:10.0.0.0/104", "::ffff:10.0.0.1", "::ffff:10.0.0.1/128"} {
		ip := keyfunc.IP(keyfunc.TrustProxies(trusted))
		for _, peer := range []string{"10.0.0.1:1", "[::ffff:10.0.0.1]:1"} {
			got, err := ip(request(peer, "X-Forwarded-For", "198.51.100.1"))
			if err != nil || got != "ip:198.51.100.1" {
				t.Errorf("TrustProxies(%q), peer %s: %q, %v; want ip:198.51.100.1", trusted, peer, got, err)
			}
		}
		if got, _ := ip(request("10.0.0.2:1", "X-Forwarded-For", "198.51.100.1")); trusted != "::ffff:10.0.0.0/104" && got != "ip:10.0.0.2" {
			t.Errorf("TrustProxies(%q) trusts 10.0.0.2: %q", trusted, got)
		}
	}
	// An IPv6 prefix that is not mapped stays IPv6.
	ip := keyfunc.IP(keyfunc.TrustProxies("::/0"))
	if got, _ := ip(request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.1")); got != "ip:10.0.0.1" {
		t.Errorf("TrustProxies(::/0) trusts an IPv4 peer: %q", got)
	}
}

// TestParsePrefixesErrors: an entry that is not an address or a prefix is
// an error that says which, and what is wanted; TrustProxies panics with
// the same words.
func TestParsePrefixesErrors(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"", " ", "bogus", "10.0.0.0/33", "10.0.0.0/", "/8", "10.0.0.256", "2001:db8::/129", "fe80::1%eth0/64", "10.0.0.0/8/8"} {
		_, err := keyfunc.ParsePrefixes("192.0.2.1", bad)
		if err == nil {
			t.Errorf("ParsePrefixes(%q) accepted it", bad)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "keyfunc: ") || !strings.Contains(msg, fmt.Sprintf("%q", strings.TrimSpace(bad))) ||
			!strings.Contains(msg, "10.0.0.0/8") {
			t.Errorf("ParsePrefixes(%q): %q; want the package, the entry and an example", bad, msg)
		}
		func() {
			defer func() {
				p := fmt.Sprint(recover())
				if !strings.HasPrefix(p, "keyfunc.TrustProxies: ") || !strings.HasSuffix(p, strings.TrimPrefix(msg, "keyfunc: ")) {
					t.Errorf("TrustProxies(%q) panicked with %q; want %q after keyfunc.TrustProxies", bad, p, msg)
				}
			}()
			keyfunc.TrustProxies(bad)
		}()
	}
}

// huge is a forged header value of about 1 MiB.
var huge = strings.Repeat("6.6.6.6, ", 1<<17)

// TestXForwardedForAppendingProxy attacks X-Forwarded-For as a client
// would behind trusted proxies that append to it: whatever the client
// sends (values of its choice, trusted addresses, garbage, empty or huge
// values, many lines), every request is keyed by its real address, read
// past the trusted hops to its right.
func TestXForwardedForAppendingProxy(t *testing.T) {
	t.Parallel()
	forgeries := [][]string{
		nil, {""}, {"", ""}, {","}, {", , ,"}, {" "}, {"\t"},
		{"6.6.6.1"}, {"6.6.6.2, 6.6.6.3"}, {"6.6.6.4", "6.6.6.5"}, {"6.6.6.6,"},
		{"10.0.0.9"}, {"10.0.0.9, 10.0.0.8"}, {"6.6.6.7, 10.0.0.9"},
		{"garbage"}, {"6.6.6.8, garbage"}, {"[2001:db8:66::1]:443"}, {"unknown"},
		{"[", "]"}, {"[::1"}, {"6.6.6.9:"}, {"6.6.6.10%x"}, {"for=6.6.6.11"},
		{huge}, {huge + "10.0.0.9"}, {huge, huge},
		strings.Split(strings.Repeat("6.6.6.12;", 1000), ";"),
	}
	ip := keyfunc.IP(keyfunc.TrustProxies("10.0.0.0/8"))
	for _, client := range []struct{ addr, key string }{
		{"198.51.100.7", "ip:198.51.100.7"},
		{"[2001:db8:5:6::7]:4711", "ip:2001:db8:5:6::/64"},
	} {
		for _, hops := range []int{1, 3} {
			for _, sameLine := range []bool{false, true} {
				for _, lines := range forgeries {
					r := viaXFFProxies(client.addr, hops, sameLine, lines)
					if key, err := ip(r); err != nil || key != client.key {
						sent := fmt.Sprintf("%q", lines)
						if len(sent) > 80 {
							sent = sent[:80] + "..."
						}
						t.Errorf("client %s sent X-Forwarded-For %s through %d proxies (same line %v): %q, %v; want %s",
							client.addr, sent, hops, sameLine, key, err, client.key)
					}
				}
			}
		}
	}
}

// viaXFFProxies returns the request the last of hops trusted proxies
// (10.0.0.1, 10.0.0.2, ...) sends on, the first having received lines of
// X-Forwarded-For from client: each appends the address it received the
// request from, on a new line or, with sameLine, after a comma on the last.
func viaXFFProxies(client string, hops int, sameLine bool, lines []string) *http.Request {
	r := request(fmt.Sprintf("10.0.0.%d:40000", hops))
	r.Header["X-Forwarded-For"] = append([]string(nil), lines...)
	from := client
	for i := 1; i <= hops; i++ {
		if n := len(r.Header["X-Forwarded-For"]); sameLine && n > 0 {
			r.Header["X-Forwarded-For"][n-1] += ", " + from
		} else {
			r.Header["X-Forwarded-For"] = append(r.Header["X-Forwarded-For"], from)
		}
		from = fmt.Sprintf("10.0.0.%d", i)
	}
	return r
}

// TestHugeForgedHeaders: a client's megabyte of forged values before what
// its proxy wrote changes neither its key nor the work done, which reads
// each header from its end: keying the request allocates no more than
// keying one without the forgery. Not parallel: AllocsPerRun counts for
// the whole process.
func TestHugeForgedHeaders(t *testing.T) {
	proxies := keyfunc.TrustProxies("10.0.0.0/8")
	tests := []struct {
		name   string
		ip     keyfunc.Func
		header string
		forged string
		real   string
	}{
		{"X-Forwarded-For", keyfunc.IP(proxies), "X-Forwarded-For", huge, "198.51.100.7"},
		{"TrustHeader", keyfunc.IP(proxies, keyfunc.TrustHeader("X-Real-IP")), "X-Real-IP", huge, "198.51.100.7"},
		{"Forwarded", keyfunc.IP(proxies, keyfunc.UseForwarded()), "Forwarded",
			strings.Repeat(`for=6.6.6.6;by="x\"y", `, 1<<15) + `for="`, `for="198.51.100.7:4711";proto=https`},
	}
	for _, tt := range tests {
		small := request("10.0.0.1:1", tt.header, tt.real)
		large := request("10.0.0.1:1", tt.header, tt.forged+", "+tt.real)
		for _, r := range []*http.Request{small, large} {
			if key, err := tt.ip(r); err != nil || key != "ip:198.51.100.7" {
				t.Errorf("%s: %q, %v; want ip:198.51.100.7", tt.name, key, err)
			}
		}
		want := testing.AllocsPerRun(10, func() { tt.ip(small) })
		if got := testing.AllocsPerRun(10, func() { tt.ip(large) }); got > want {
			t.Errorf("%s: %v allocations with a forged megabyte, %v without", tt.name, got, want)
		}
	}
}
