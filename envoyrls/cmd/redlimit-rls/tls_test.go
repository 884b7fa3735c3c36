package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

const tlsConfig = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n"

// tlsClient returns a gRPC client of addr over TLS that trusts ca and
// presents the certificate cert/key when given.
func tlsClient(t *testing.T, p *inProcess, ca, cert, key string) rlsv3.RateLimitServiceClient {
	t.Helper()
	pool, err := certPool(ca)
	if err != nil {
		t.Fatal(err)
	}
	c := &tls.Config{RootCAs: pool, ServerName: "localhost"}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return p.client(t, grpc.WithTransportCredentials(credentials.NewTLS(c)))
}

// TestGRPCServerTLS: GRPC_SERVER_USE_TLS serves gRPC over TLS with the
// certificate of GRPC_SERVER_TLS_CERT and _KEY (a plaintext client
// fails), read again when the files change, as the reference's
// TestReloadGRPCServerCerts; GRPC_CLIENT_TLS_CACERT requires a client
// certificate that CA signed, and GRPC_CLIENT_TLS_SAN one for that name
// (the reference's Test_mTLS).
func TestGRPCServerTLS(t *testing.T) {
	t.Parallel()
	ca := newPKI(t)
	cert, key := ca.issue(t, "server", "localhost", x509.ExtKeyUsageServerAuth)
	dir := t.TempDir()
	writeConfig(t, dir, map[string]string{"c.yaml": tlsConfig})
	base := []string{"GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "HOST=127.0.0.1", "PORT=0", "GRPC_SERVER_USE_TLS=true",
		"GRPC_SERVER_TLS_CERT=" + cert, "GRPC_SERVER_TLS_KEY=" + key}

	p := mustRun(t, base, "-config", dir)
	if r, err := tlsClient(t, p, ca.ca, "", "").ShouldRateLimit(t.Context(), request("d", "k", "a")); err != nil || r.GetStatuses()[0].GetLimitRemaining() != 4 {
		t.Fatalf("over TLS: %v %v", r, err)
	}
	if _, err := p.client(t).ShouldRateLimit(t.Context(), request("d", "k", "a")); err == nil {
		t.Error("a plaintext client was answered")
	}
	// A new certificate from another CA, moved over the files.
	other := newPKI(t)
	cert2, key2 := other.issue(t, "server2", "localhost", x509.ExtKeyUsageServerAuth)
	for from, to := range map[string]string{cert2: cert, key2: key} {
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	for range 100 { // a handshake looks at the files at most once a second
		if _, err = tlsClient(t, p, other.ca, "", "").ShouldRateLimit(t.Context(), request("d", "k", "a")); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("the new certificate is not served: %v", err)
	}

	// mTLS, with the client's name checked.
	clientCert, clientKey := ca.issue(t, "client", "envoy.example", x509.ExtKeyUsageClientAuth)
	wrongCert, wrongKey := ca.issue(t, "wrong", "other.example", x509.ExtKeyUsageClientAuth)
	cert3, key3 := ca.issue(t, "server3", "localhost", x509.ExtKeyUsageServerAuth)
	m := mustRun(t, append(base[:4:4], "GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT="+cert3, "GRPC_SERVER_TLS_KEY="+key3,
		"GRPC_CLIENT_TLS_CACERT="+ca.ca, "GRPC_CLIENT_TLS_SAN=envoy.example"), "-config", dir)
	if _, err := tlsClient(t, m, ca.ca, clientCert, clientKey).ShouldRateLimit(t.Context(), request("d", "k", "a")); err != nil {
		t.Errorf("mTLS: %v", err)
	}
	if _, err := tlsClient(t, m, ca.ca, "", "").ShouldRateLimit(t.Context(), request("d", "k", "a")); err == nil {
		t.Error("mTLS: a client without a certificate was answered")
	}
	if _, err := tlsClient(t, m, ca.ca, wrongCert, wrongKey).ShouldRateLimit(t.Context(), request("d", "k", "a")); err == nil {
		t.Error("mTLS: a client certificate for another name was answered")
	}
	if !strings.Contains(m.log(), "tls=true") {
		t.Errorf("the serving line does not say TLS:\n%s", m.log())
	}
}

// TestGRPCServerTLSRefused: GRPC_SERVER_USE_TLS without its files is
// refused at start, with one line naming them.
func TestGRPCServerTLSRefused(t *testing.T) {
	t.Parallel()
	_, err := startRun(t, []string{"GRPC_SERVER_USE_TLS=true", "GRPC_PORT=0", "PORT=0"}, "-config", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "GRPC_SERVER_TLS_CERT") || strings.Contains(err.Error(), "\n") {
		t.Errorf("%v", err)
	}
}
