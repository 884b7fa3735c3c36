package keyfunc_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/redlimit/redlimit/keyfunc"
)

// TestIPUnixSocketPeer: a peer on a Unix socket ("@" or "" as net/http
// reports it) is one client, keyed keyfunc.UnixSocketKey, whose forwarding
// headers count only with TrustUnixSocket.
func TestIPUnixSocketPeer(t *testing.T) {
	t.Parallel()
	unix := keyfunc.TrustUnixSocket()
	proxies := keyfunc.TrustProxies("10.0.0.0/8")
	tests := []keyCase{
		{"@", keyfunc.IP(), request("@"), "unix:"},
		{"empty", keyfunc.IP(), request(""), "unix:"},
		{"@ with XFF, not trusted", keyfunc.IP(), request("@", "X-Forwarded-For", "198.51.100.1"), "unix:"},
		{"empty with XFF, not trusted", keyfunc.IP(), request("", "X-Forwarded-For", "198.51.100.1"), "unix:"},
		{"TrustProxies alone does not trust the socket", keyfunc.IP(proxies), request("@", "X-Forwarded-For", "198.51.100.1"), "unix:"},
		{"@ with X-Real-IP, not trusted", keyfunc.IP(keyfunc.TrustHeader("X-Real-IP")), request("@", "X-Real-IP", "198.51.100.1"), "unix:"},
		{"@ with Forwarded, not trusted", keyfunc.IP(keyfunc.UseForwarded()), request("@", "Forwarded", "for=198.51.100.1"), "unix:"},
		{"@ trusted, XFF", keyfunc.IP(unix), request("@", "X-Forwarded-For", "198.51.100.1"), "ip:198.51.100.1"},
		{"empty trusted, XFF", keyfunc.IP(unix), request("", "X-Forwarded-For", "198.51.100.1"), "ip:198.51.100.1"},
		{"trusted, forged entries left of the proxy's", keyfunc.IP(unix),
			request("@", "X-Forwarded-For", "6.6.6.6, 6.6.6.7, 198.51.100.1"), "ip:198.51.100.1"},
		{"trusted, TrustProxies hops skipped", keyfunc.IP(unix, proxies),
			request("@", "X-Forwarded-For", "6.6.6.6, 198.51.100.1, 10.0.0.5"), "ip:198.51.100.1"},
		{"trusted, hops not in TrustProxies are clients", keyfunc.IP(unix),
			request("@", "X-Forwarded-For", "198.51.100.1, 10.0.0.5"), "ip:10.0.0.5"},
		{"trusted, every hop trusted: the leftmost", keyfunc.IP(unix, proxies),
			request("@", "X-Forwarded-For", "10.0.0.9, 10.0.0.5"), "ip:10.0.0.9"},
		{"trusted, no header", keyfunc.IP(unix), request("@"), "unix:"},
		{"trusted, garbage: the socket", keyfunc.IP(unix), request("@", "X-Forwarded-For", "198.51.100.1, garbage"), "unix:"},
		{"trusted, a proxy's unix: entry: the socket", keyfunc.IP(unix), request("@", "X-Forwarded-For", "198.51.100.1, unix:"), "unix:"},
		{"trusted, X-Real-IP", keyfunc.IP(unix, keyfunc.TrustHeader("X-Real-IP")),
			request("@", "X-Real-IP", "6.6.6.6, 198.51.100.2", "X-Forwarded-For", "198.51.100.1"), "ip:198.51.100.2"},
		{"trusted, Forwarded", keyfunc.IP(unix, keyfunc.UseForwarded()),
			request("", "Forwarded", "for=6.6.6.6, for=198.51.100.3", "X-Forwarded-For", "198.51.100.1"), "ip:198.51.100.3"},
		{"trusted, Forwarded for=unknown: the socket", keyfunc.IP(unix, keyfunc.UseForwarded()),
			request("@", "Forwarded", "for=unknown"), "unix:"},
		{"trusted, IPv6 client grouped", keyfunc.IP(unix), request("@", "X-Forwarded-For", "2001:db8:1:2::9"), "ip:2001:db8:1:2::/64"},
		// The option trusts Unix sockets, not whoever connects over TCP.
		{"TCP peer, forged XFF ignored", keyfunc.IP(unix), request("203.0.113.7:1", "X-Forwarded-For", "198.51.100.1"), "ip:203.0.113.7"},
		{"TCP peer, forged X-Real-IP ignored", keyfunc.IP(unix, keyfunc.TrustHeader("X-Real-IP")),
			request("203.0.113.7:1", "X-Real-IP", "198.51.100.1"), "ip:203.0.113.7"},
		{"TCP peer, forged Forwarded ignored", keyfunc.IP(unix, keyfunc.UseForwarded()),
			request("203.0.113.7:1", "Forwarded", "for=198.51.100.1"), "ip:203.0.113.7"},
		{"TCP peer, forged unix: in XFF ignored", keyfunc.IP(unix, proxies),
			request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.1, unix:"), "ip:10.0.0.1"},
	}
	checkKeys(t, tests)
	if keyfunc.UnixSocketKey != "unix:" {
		t.Errorf("UnixSocketKey = %q", keyfunc.UnixSocketKey)
	}
}

// TestIPUnixSocketLocalAddr: where net/http says what the request was
// received on (http.LocalAddrContextKey), that decides whether the peer is
// on a Unix socket, not the spelling of RemoteAddr.
func TestIPUnixSocketLocalAddr(t *testing.T) {
	t.Parallel()
	on := func(local net.Addr, remote string, headers ...string) *http.Request {
		r := request(remote, headers...)
		return r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, local))
	}
	sock := &net.UnixAddr{Name: "/run/app.sock", Net: "unix"}
	tcp := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 2), Port: 8080}
	trusting := keyfunc.IP(keyfunc.TrustUnixSocket())
	tests := []keyCase{
		{"unix, @", keyfunc.IP(), on(sock, "@"), "unix:"},
		{"unix, empty", keyfunc.IP(), on(sock, ""), "unix:"},
		{"unix, a peer bound to a path", keyfunc.IP(), on(sock, "/tmp/client.sock"), "unix:"},
		{"unix, a peer bound to an abstract name", keyfunc.IP(), on(sock, "@client"), "unix:"},
		{"unix, named peer trusted", trusting, on(sock, "/tmp/client.sock", "X-Forwarded-For", "198.51.100.1"), "ip:198.51.100.1"},
		{"unix, an address (PROXY protocol) is the peer", trusting, on(sock, "203.0.113.7:1", "X-Forwarded-For", "198.51.100.1"), "ip:203.0.113.7"},
		{"TCP, empty is no key", trusting, on(tcp, "", "X-Forwarded-For", "198.51.100.1"), ""},
		{"TCP, @ is no key", trusting, on(tcp, "@", "X-Forwarded-For", "198.51.100.1"), ""},
		{"unknown, a path is no key", keyfunc.IP(), request("/tmp/client.sock"), ""},
		{"unknown, an abstract name is no key", keyfunc.IP(), request("@client"), ""},
	}
	checkKeys(t, tests)
}

// TestIPUnixSocketServer serves HTTP on a real Unix socket, as behind a
// reverse proxy on the same host, and shows the keys the handler sees.
func TestIPUnixSocketServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	funcs := []keyfunc.Func{
		keyfunc.IP(),
		keyfunc.IP(keyfunc.TrustUnixSocket()),
		keyfunc.IP(keyfunc.TrustUnixSocket(), keyfunc.UseForwarded()),
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line := []string{r.RemoteAddr}
		for _, f := range funcs {
			k, err := f(r)
			if err != nil {
				k = "error: " + err.Error()
			}
			line = append(line, k)
		}
		io.WriteString(w, strings.Join(line, " | "))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	get := func(t *testing.T, d *net.Dialer) string {
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		}}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodGet, "http://proxied/", nil)
		req.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.1")
		req.Header.Set("Forwarded", `for=6.6.6.6, for="[2001:db8:1:2::9]:4711"`)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(body)
	}

	t.Run("unnamed peer", func(t *testing.T) {
		got := get(t, &net.Dialer{})
		remote := "@" // how Linux names an unnamed peer
		if runtime.GOOS != "linux" {
			remote, _, _ = strings.Cut(got, " ")
		}
		want := remote + " | unix: | ip:198.51.100.1 | ip:2001:db8:1:2::/64"
		if got != want {
			t.Errorf("handler saw %q, want %q", got, want)
		}
	})
	t.Run("peer bound to a path", func(t *testing.T) {
		client := filepath.Join(dir, "c")
		got := get(t, &net.Dialer{LocalAddr: &net.UnixAddr{Name: client, Net: "unix"}})
		want := client + " | unix: | ip:198.51.100.1 | ip:2001:db8:1:2::/64"
		if got != want {
			t.Errorf("handler saw %q, want %q", got, want)
		}
	})
}
