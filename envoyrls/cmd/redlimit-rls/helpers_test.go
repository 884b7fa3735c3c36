package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// inProcess is redlimit-rls's run, serving in a goroutine of the test.
type inProcess struct {
	grpcAddr, httpAddr, debugAddr, promAddr string

	mu   sync.Mutex
	logs bytes.Buffer
	done chan error
	stop context.CancelFunc
}

// logWriter is the program's stderr: it keeps what is written and tells
// when a line is complete.
type logWriter struct {
	p     *inProcess
	lines chan string
	part  []byte
}

func (w *logWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	w.p.logs.Write(b)
	w.p.mu.Unlock()
	w.part = append(w.part, b...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			return len(b), nil
		}
		select {
		case w.lines <- string(w.part[:i]):
		default:
		}
		w.part = w.part[i+1:]
	}
}

// log returns what the program logged so far.
func (p *inProcess) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// startRun runs the program with args and environ (NAME=VALUE) until the
// test ends, and waits (at most 30 s) until it serves. It returns the
// error run returned instead when it stops first.
func startRun(t *testing.T, environ []string, args ...string) (*inProcess, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &inProcess{done: make(chan error, 1), stop: cancel}
	w := &logWriter{p: p, lines: make(chan string, 1000)}
	go func() { p.done <- run(ctx, args, environ, w) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			t.Errorf("still running 20 s after it was told to stop")
		}
	})
	deadline := time.After(30 * time.Second)
	for {
		select {
		case line := <-w.lines:
			if m := serving.FindStringSubmatch(line); m != nil {
				p.grpcAddr, p.httpAddr = m[1], m[2]
				p.debugAddr = attr(line, "debug")
				p.promAddr = attr(line, "prometheus")
				return p, nil
			}
		case err := <-p.done:
			p.done <- err
			return p, err
		case <-deadline:
			t.Fatalf("not serving after 30 s:\n%s", p.log())
		}
	}
}

// mustRun is startRun that fails the test when the program stops.
func mustRun(t *testing.T, environ []string, args ...string) *inProcess {
	t.Helper()
	p, err := startRun(t, environ, args...)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, p.log())
	}
	return p
}

// attr returns the value of name=value in a log line.
func attr(line, name string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			return v
		}
	}
	return ""
}

// client returns Envoy's generated client of the program's gRPC port.
func (p *inProcess) client(t *testing.T, opts ...grpc.DialOption) rlsv3.RateLimitServiceClient {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	target := p.grpcAddr
	if strings.HasPrefix(target, "/") {
		target = "unix://" + target
	}
	cc, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc)
}

// get asks the program's HTTP port (or another address) for path.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// request is a RateLimitRequest of one descriptor of key=value pairs.
func request(domain string, kv ...string) *rlsv3.RateLimitRequest {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
}

// writeConfig writes files (name: content) under dir.
func writeConfig(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// pki is a test CA and the certificates it signs, in files.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	ca     string // the CA's PEM file
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{dir: t.TempDir(), caCert: cert, caKey: key}
	p.ca = p.write(t, "ca.pem", "CERTIFICATE", der)
	return p
}

// issue writes a certificate for dnsName (and 127.0.0.1) and its key, and
// returns their files.
func (p *pki) issue(t *testing.T, name, dnsName string, usage x509.ExtKeyUsage) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: dnsName}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), DNSNames: []string{dnsName}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "EC PRIVATE KEY", kder)
}

func (p *pki) write(t *testing.T, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// grpcConn returns a plaintext connection to the program's gRPC port.
func grpcConn(t *testing.T, p *inProcess) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// startQuiet runs the program on free ports it is given, for settings
// under which it may log nothing, and waits (at most 30 s) until its
// /healthcheck answers.
func startQuiet(t *testing.T, environ []string, args ...string) *inProcess {
	t.Helper()
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	p := &inProcess{grpcAddr: grpcAddr, httpAddr: httpAddr, done: make(chan error, 1), stop: cancel}
	w := &logWriter{p: p, lines: make(chan string, 1000)}
	go func() { p.done <- run(ctx, append(args, "-grpc", grpcAddr, "-http", httpAddr), environ, w) }()
	t.Cleanup(func() { cancel(); <-p.done })
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-p.done:
			p.done <- err
			t.Fatalf("run: %v\n%s", err, p.log())
		default:
		}
		if resp, err := http.Get("http://" + httpAddr + "/healthcheck"); err == nil {
			resp.Body.Close()
			return p
		}
	}
	t.Fatalf("no /healthcheck after 30 s:\n%s", p.log())
	return nil
}
