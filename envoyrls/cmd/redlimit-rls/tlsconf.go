package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// clientTLS is the TLS configuration of the connections to Redis
// (REDIS_TLS and its files): the client's certificate and key when
// given, REDIS_TLS_CACERT added to the system's roots, and with
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION the chain verified without the
// host name, as the reference verifies it.
func clientTLS(f tlsFiles) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.cert != "" || f.key != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY: %v", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	if f.ca != "" {
		pool, err := certPool(f.ca)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CACERT: %v", err)
		}
		c.RootCAs = pool
	}
	if f.skipHostVerification {
		c.InsecureSkipVerify = true // the chain is verified below, without the name
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("redis presented no certificate")
			}
			opts := x509.VerifyOptions{Roots: c.RootCAs, Intermediates: x509.NewCertPool()}
			for _, cert := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(cert)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return c, nil
}

// certPool returns the system's roots with the certificates of the PEM
// file at path added.
func certPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool, _ := x509.SystemCertPool()
	if pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// serverTLS is the gRPC listener's TLS configuration
// (GRPC_SERVER_USE_TLS): the certificate chain and key of
// GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY, read again when either
// file changes, as the reference reloads them; with
// GRPC_CLIENT_TLS_CACERT, clients must present a certificate that CA
// signed (mTLS), and with GRPC_CLIENT_TLS_SAN one valid for that DNS
// name.
func serverTLS(f tlsFiles) (*tls.Config, error) {
	kp := &keyPair{cert: f.cert, key: f.key}
	if err := kp.load(); err != nil {
		return nil, fmt.Errorf("GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY: %v", err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.get, NextProtos: []string{"h2"}}
	if f.ca == "" {
		return c, nil
	}
	pool, err := certPool(f.ca)
	if err != nil {
		return nil, fmt.Errorf("GRPC_CLIENT_TLS_CACERT: %v", err)
	}
	c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	if f.san != "" {
		c.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			for _, chain := range chains {
				if err := chain[0].VerifyHostname(f.san); err == nil {
					return nil
				}
			}
			return fmt.Errorf("the client's certificate is not valid for %q (GRPC_CLIENT_TLS_SAN)", f.san)
		}
	}
	return c, nil
}

// keyPair is a certificate and its key read from files, read again on a
// handshake after either file changed (a new size or modification time);
// a pair that does not load leaves the last one in use.
type keyPair struct {
	cert, key string

	mu      sync.Mutex
	pair    *tls.Certificate
	version string // the files' sizes and modification times when read
	checked time.Time
}

// get is tls.Config.GetCertificate: it looks at the files at most once
// a second.
func (k *keyPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if time.Since(k.checked) >= time.Second {
		k.checked = time.Now()
		if k.stat() != k.version {
			_ = k.loadLocked() // the old pair stays on an error
		}
	}
	return k.pair, nil
}

func (k *keyPair) load() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.loadLocked()
}

func (k *keyPair) loadLocked() error {
	version := k.stat()
	pair, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		return err
	}
	k.pair, k.version = &pair, version
	return nil
}

// stat returns the files' sizes and modification times.
func (k *keyPair) stat() string {
	var v string
	for _, path := range []string{k.cert, k.key} {
		if info, err := os.Stat(path); err == nil {
			v += fmt.Sprintf("%d/%d;", info.Size(), info.ModTime().UnixNano())
		}
	}
	return v
}
