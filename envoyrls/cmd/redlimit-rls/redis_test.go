package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlimit/redlimit/internal/redistest"
)

const redisConfig = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"

// limited asks the program for key k four times and returns the overall
// codes: a limit of 3 a minute is enforced when the fourth is denied.
func limited(t *testing.T, p *inProcess, value string) string {
	t.Helper()
	c := p.client(t)
	var out []string
	for range 4 {
		r, err := c.ShouldRateLimit(t.Context(), request("d", "k", value))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.GetOverallCode().String())
	}
	return strings.Join(out, " ")
}

// TestRedisACLUser: REDIS_AUTH=user:password authenticates as a Redis ACL
// user, as the reference does, on a real redis-server whose default user
// is off; the wrong password is refused at start once
// REDIS_STARTUP_MAX_ELAPSED_TIME has passed.
func TestRedisACLUser(t *testing.T) {
	t.Parallel()
	srv := redistest.Standalone(t)
	admin := srv.Client(t)
	ctx := t.Context()
	if err := admin.Do(ctx, "ACL", "SETUSER", "ratelimit", "on", ">s3cret", "~*", "&*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeConfig(t, dir, map[string]string{"c.yaml": redisConfig})
	base := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + srv.Addr, "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0", "REDLIMIT_FAILURE=closed"}
	p := mustRun(t, append(base, "REDIS_AUTH=ratelimit:s3cret"), "-config", dir)
	if err := admin.Do(ctx, "ACL", "SETUSER", "default", "off").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "USER", "default").Err(); err != nil {
		t.Fatal(err)
	}
	if got := limited(t, p, "acl"); got != "OK OK OK OVER_LIMIT" {
		t.Errorf("as an ACL user: %s\n%s", got, p.log())
	}
	_, err := startRun(t, append(base, "REDIS_AUTH=ratelimit:wrong", "REDIS_STARTUP_INITIAL_INTERVAL=10ms", "REDIS_STARTUP_MAX_ELAPSED_TIME=300ms"), "-config", dir)
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("a wrong password: %v", err)
	}
}

// TestRedisTLS: REDIS_TLS=true with REDIS_TLS_CACERT reaches a
// redis-server that speaks only TLS, as the reference does; with a client
// certificate (REDIS_TLS_CLIENT_CERT and _KEY) one that requires it; and
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION accepts a certificate for another
// name, still signed by the CA.
func TestRedisTLS(t *testing.T) {
	t.Parallel()
	ca := newPKI(t)
	cert, key := ca.issue(t, "redis", "localhost", x509.ExtKeyUsageServerAuth)
	addr := startTLSRedis(t, ca, cert, key, "yes")
	dir := t.TempDir()
	writeConfig(t, dir, map[string]string{"c.yaml": redisConfig})
	clientCert, clientKey := ca.issue(t, "client", "ratelimit", x509.ExtKeyUsageClientAuth)
	base := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + strings.Replace(addr, "127.0.0.1", "localhost", 1), "GRPC_HOST=127.0.0.1", "GRPC_PORT=0",
		"HOST=127.0.0.1", "PORT=0", "REDLIMIT_FAILURE=closed", "REDIS_TLS=true", "REDIS_TLS_CACERT=" + ca.ca}
	p := mustRun(t, append(base, "REDIS_TLS_CLIENT_CERT="+clientCert, "REDIS_TLS_CLIENT_KEY="+clientKey), "-config", dir)
	if got := limited(t, p, "tls"); got != "OK OK OK OVER_LIMIT" {
		t.Errorf("over TLS: %s\n%s", got, p.log())
	}
	// Without the client certificate the server refuses it: redlimit-rls
	// waits for Redis, then gives up.
	if _, err := startRun(t, append(base, "REDIS_STARTUP_INITIAL_INTERVAL=10ms", "REDIS_STARTUP_MAX_ELAPSED_TIME=300ms"), "-config", dir); err == nil {
		t.Error("no client certificate, yet Redis answered")
	}

	// A certificate for another name: refused, unless hostname
	// verification is skipped.
	wrong, wrongKey := ca.issue(t, "redis-other", "other.example", x509.ExtKeyUsageServerAuth)
	addr2 := startTLSRedis(t, ca, wrong, wrongKey, "no")
	env2 := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + strings.Replace(addr2, "127.0.0.1", "localhost", 1), "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0",
		"REDLIMIT_FAILURE=closed", "REDIS_TLS=true", "REDIS_TLS_CACERT=" + ca.ca}
	if _, err := startRun(t, append(env2, "REDIS_STARTUP_INITIAL_INTERVAL=10ms", "REDIS_STARTUP_MAX_ELAPSED_TIME=300ms"), "-config", dir); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a certificate for another name: %v", err)
	}
	p2 := mustRun(t, append(env2, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true"), "-config", dir)
	if got := limited(t, p2, "skip"); got != "OK OK OK OVER_LIMIT" {
		t.Errorf("hostname verification skipped: %s\n%s", got, p2.log())
	}
}

// startTLSRedis starts a redis-server that speaks only TLS on a free
// loopback port, with authClients "yes" (a client certificate required)
// or "no", and returns its address.
func startTLSRedis(t *testing.T, ca *pki, cert, key, authClients string) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("REDLIMIT_REQUIRE_REDIS") != "" {
			t.Fatalf("redis-server: %v", err)
		}
		t.Skip("redis-server is not installed")
	}
	addr := freeAddr(t)
	port := addr[strings.LastIndexByte(addr, ':')+1:]
	cmd := exec.Command(bin, "--port", "0", "--tls-port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca.ca, "--tls-auth-clients", authClients, "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pool, _ := certPool(ca.ca)
	clientCert, clientKey := ca.issue(t, "probe-"+port, "probe", x509.ExtKeyUsageClientAuth)
	pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	probe := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: &tls.Config{RootCAs: pool, InsecureSkipVerify: true, Certificates: []tls.Certificate{pair}}, MaxRetries: -1}) // #nosec: a probe of readiness
	defer probe.Close()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := probe.Ping(ctx).Err()
		cancel()
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server with TLS on %s: %v", addr, err)
		}
	}
}

// TestRedisKinds: REDIS_TYPE and REDIS_URL in the reference's forms: a
// Unix socket (REDIS_SOCKET_TYPE=unix), a cluster (the nodes,
// comma-separated) and Sentinel (the master's name, then the sentinels),
// with REDIS_SENTINEL_AUTH authenticating to the sentinels as an ACL
// user.
func TestRedisKinds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeConfig(t, dir, map[string]string{"c.yaml": redisConfig})
	base := append([]string{"REDLIMIT_FAILURE=closed"}, listen...)
	t.Run("unix", func(t *testing.T) {
		t.Parallel()
		sock := startUnixRedis(t)
		p := mustRun(t, append(base, "REDIS_SOCKET_TYPE=unix", "REDIS_URL="+sock), "-config", dir)
		if got := limited(t, p, "unix"); got != "OK OK OK OVER_LIMIT" {
			t.Errorf("%s\n%s", got, p.log())
		}
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		c := redistest.NewCluster(t, 3)
		p := mustRun(t, append(base, "REDIS_TYPE=cluster", "REDIS_URL="+strings.Join(c.Addrs(), ",")), "-config", dir)
		if got := limited(t, p, "cluster"); got != "OK OK OK OVER_LIMIT" {
			t.Errorf("%s\n%s", got, p.log())
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		s := redistest.NewSentinel(t)
		sc := redis.NewClient(&redis.Options{Addr: s.Sentinel.Addr})
		defer sc.Close()
		for _, cmd := range [][]any{{"ACL", "SETUSER", "watcher", "on", ">pw", "allchannels", "+@all"}, {"ACL", "SETUSER", "default", "off"}} {
			if err := sc.Do(t.Context(), cmd...).Err(); err != nil {
				t.Fatal(err)
			}
		}
		url := "REDIS_URL=" + redistest.SentinelMaster + "," + s.Sentinel.Addr
		p := mustRun(t, append(base, "REDIS_TYPE=sentinel", url, "REDIS_SENTINEL_AUTH=watcher:pw"), "-config", dir)
		if got := limited(t, p, "sentinel"); got != "OK OK OK OVER_LIMIT" {
			t.Errorf("%s\n%s", got, p.log())
		}
		if _, err := startRun(t, append(base, "REDIS_TYPE=sentinel", url, "REDIS_STARTUP_INITIAL_INTERVAL=10ms", "REDIS_STARTUP_MAX_ELAPSED_TIME=300ms"), "-config", dir); err == nil {
			t.Error("answered without REDIS_SENTINEL_AUTH")
		}
	})
}

// startUnixRedis starts a redis-server on a Unix socket only and
// returns its path.
func startUnixRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("REDLIMIT_REQUIRE_REDIS") != "" {
			t.Fatalf("redis-server: %v", err)
		}
		t.Skip("redis-server is not installed")
	}
	dir, err := os.MkdirTemp("", "rls") // a short path: a socket's is at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := dir + "/redis.sock"
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	probe := redis.NewClient(&redis.Options{Network: "unix", Addr: sock, MaxRetries: -1})
	defer probe.Close()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if probe.Ping(t.Context()).Err() == nil {
			return sock
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer", sock)
		}
	}
}

// TestUniversalOptions: the reference's settings of its Redis client
// become go-redis's options: REDIS_AUTH and REDIS_SENTINEL_AUTH as users
// and passwords, REDIS_POOL_SIZE, REDIS_TIMEOUT for dialing, reading and
// writing; a URL's own credentials stay.
func TestUniversalOptions(t *testing.T) {
	t.Parallel()
	e := envOf([]string{"REDIS_URL=mymaster,h1:26379,h2:26379", "REDIS_TYPE=sentinel", "REDIS_AUTH=app:pw", "REDIS_SENTINEL_AUTH=sentinel-pw",
		"REDIS_POOL_SIZE=64", "REDIS_TIMEOUT=2s"})
	s, err := parse(nil, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	uo, err := universalOptions(s.redis, &s.redisOpts)
	if err != nil {
		t.Fatal(err)
	}
	if uo.MasterName != "mymaster" || strings.Join(uo.Addrs, ",") != "h1:26379,h2:26379" || uo.Username != "app" || uo.Password != "pw" ||
		uo.SentinelUsername != "" || uo.SentinelPassword != "sentinel-pw" || uo.PoolSize != 64 || uo.DialTimeout != 2*time.Second || uo.ReadTimeout != 2*time.Second {
		t.Errorf("%+v", uo)
	}
	s.redisOpts.user, s.redisOpts.password = "app", "pw"
	uo, err = universalOptions("redis://u:p@h:6379/2", &s.redisOpts)
	if err != nil || uo.Username != "u" || uo.Password != "p" || uo.DB != 2 {
		t.Errorf("a URL's credentials: %+v %v", uo, err)
	}
}
