package etcdlock_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/seckill/stock/internal/skulock/etcdlock"
	"github.com/seckill/stock/internal/testserver"
)

// pemFiles writes a certificate signed by ca (self-signed when ca is nil)
// and its key into dir as name.pem and name-key.pem.
func pemFiles(t *testing.T, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	signer, signerKey := tmpl, key
	if ca == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	} else {
		signer, signerKey = ca, caKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(file, kind string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(name+".pem", "CERTIFICATE", der)
	write(name+"-key.pem", "EC PRIVATE KEY", kb)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// With mutual TLS the locker works given the CA, a client certificate and
// its key (https:// endpoints), and Dial fails without a client
// certificate.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, caKey := pemFiles(t, dir, "ca", nil, nil, x509.ExtKeyUsageAny)
	pemFiles(t, dir, "server", ca, caKey, x509.ExtKeyUsageServerAuth)
	pemFiles(t, dir, "client", ca, caKey, x509.ExtKeyUsageClientAuth)
	f := func(n string) string { return filepath.Join(dir, n) }
	client := fmt.Sprintf("https://127.0.0.1:%d", testserver.FreePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", testserver.FreePort(t))
	cmd := exec.CommandContext(t.Context(), "etcd", "--name", "tls", "--data-dir", f("data"), //nolint:gosec // G204: the test's own etcd
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "tls="+peer,
		"--cert-file", f("server.pem"), "--key-file", f("server-key.pem"), "--client-cert-auth", "--trusted-ca-file", f("ca.pem"),
		"--logger", "zap", "--log-outputs", f("etcd.log"), "--log-level", "warn")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	cfg := etcdlock.ClientConfig{Endpoints: []string{client}, CA: f("ca.pem"), Cert: f("client.pem"), Key: f("client-key.pem"), DialTimeout: 2 * time.Second}
	cli, err := etcdlock.Dial(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	l := locker(t, cli, 5*time.Second)
	var lerr error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var h interface{ Unlock(context.Context) error }
		if h, lerr = l.TryLock(context.Background(), "tls", time.Second, 0); lerr == nil {
			lerr = h.Unlock(context.Background())
			break
		}
	}
	if lerr != nil {
		log, _ := os.ReadFile(f("etcd.log"))
		t.Fatalf("TryLock over mutual TLS = %v\n%s", lerr, log)
	}
	noCert := cfg
	noCert.Cert, noCert.Key = "", ""
	bare, err := etcdlock.Dial(noCert)
	if err == nil {
		defer func() { _ = bare.Close() }()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := bare.Get(ctx, "x"); err == nil {
			t.Error("a client without a certificate was served; want it refused")
		}
	}
}
