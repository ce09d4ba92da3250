package authentication

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authentication/request/union"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a client certificate of cn in groups, valid until notAfter.
func (ca *testCA) issue(t *testing.T, cn string, groups []string, notAfter time.Time) *x509.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn, Organization: groups},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: notAfter, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return cert
}

func request(cert *x509.Certificate, header map[string]string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1/apis/mounts.kcp.io/v1alpha1/mounts", nil)
	if cert != nil {
		req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return req
}

// chain is the delegated chain of the generic apiserver, as authenticatorfactory builds it:
// requestheader, then client certificates, then a token authenticator; it counts its calls.
type chain struct {
	authenticator.Request
	calls atomic.Int32
}

func (c *chain) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	c.calls.Add(1)
	return c.Request.AuthenticateRequest(req)
}

type fixture struct {
	clientCA, proxyCA *testCA
	proxyCAFile       string
	proxyCAContent    *dynamiccertificates.DynamicFileCAContent
	allowedNames      []string
	rh                *authenticatorfactory.RequestHeaderConfig
	chain             *chain
	cache             *certCache
	now               time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{clientCA: newCA(t, "client-ca"), proxyCA: newCA(t, "front-proxy-ca"), now: time.Now(),
		proxyCAFile: filepath.Join(t.TempDir(), "front-proxy-ca.crt"), allowedNames: []string{"front-proxy-client"}}
	clientCA, err := dynamiccertificates.NewStaticCAContent("client-ca", f.clientCA.pem)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.proxyCAFile, f.proxyCA.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	// Reloadable, as the requestheader CA of kube-system/extension-apiserver-authentication is.
	if f.proxyCAContent, err = dynamiccertificates.NewDynamicCAContentFromFile("front-proxy-ca", f.proxyCAFile); err != nil {
		t.Fatal(err)
	}
	f.rh = &authenticatorfactory.RequestHeaderConfig{
		CAContentProvider:   f.proxyCAContent,
		UsernameHeaders:     headerrequest.StaticStringSlice{"X-Remote-User"},
		UIDHeaders:          headerrequest.StaticStringSlice{"X-Remote-Uid"},
		GroupHeaders:        headerrequest.StaticStringSlice{"X-Remote-Group"},
		ExtraHeaderPrefixes: headerrequest.StaticStringSlice{"X-Remote-Extra-"},
		AllowedClientNames:  headerrequest.StringSliceProviderFunc(func() []string { return f.allowedNames }),
	}
	f.chain = &chain{Request: group.NewAuthenticatedGroupAdder(union.New(
		headerrequest.NewDynamicVerifyOptionsSecure(f.rh.CAContentProvider.VerifyOptions, f.rh.AllowedClientNames,
			f.rh.UsernameHeaders, f.rh.UIDHeaders, f.rh.GroupHeaders, f.rh.ExtraHeaderPrefixes),
		x509request.NewDynamic(clientCA.VerifyOptions, x509request.CommonNameUserConversion),
		authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
			if req.Header.Get("Authorization") == "Bearer good" {
				return &authenticator.Response{User: &user.DefaultInfo{Name: "token-user"}}, true, nil
			}
			return nil, false, nil
		}),
	))}
	f.cache = CachingCertificates(f.chain, f.rh, 10*time.Second).(*certCache)
	f.cache.now = func() time.Time { return f.now }
	return f
}

// rotateProxyCA replaces the requestheader CA bundle's content, as a new ConfigMap would.
func (f *fixture) rotateProxyCA(t *testing.T, pem []byte) {
	t.Helper()
	if err := os.WriteFile(f.proxyCAFile, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.proxyCAContent.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) auth(t *testing.T, req *http.Request) (string, []string, error) {
	t.Helper()
	resp, ok, err := f.cache.AuthenticateRequest(req)
	if err != nil || !ok {
		return "", nil, errors.Join(err, errors.New("not authenticated"))
	}
	return resp.User.GetName(), resp.User.GetGroups(), nil
}

func TestUserCertificateIsVerifiedOncePerTTL(t *testing.T) {
	f := newFixture(t)
	alice := f.clientCA.issue(t, "alice", []string{"dev"}, f.now.Add(time.Hour))
	for i := range 3 {
		name, groups, err := f.auth(t, request(alice, nil))
		if err != nil || name != "alice" || len(groups) != 2 || groups[0] != "dev" || groups[1] != user.AllAuthenticated {
			t.Fatalf("request %d: %q %v %v", i, name, groups, err)
		}
	}
	if n := f.chain.calls.Load(); n != 1 {
		t.Errorf("the chain authenticated %d times, want 1", n)
	}

	// Another certificate (another connection) is verified on its own.
	bob := f.clientCA.issue(t, "bob", nil, f.now.Add(time.Hour))
	if name, _, err := f.auth(t, request(bob, nil)); err != nil || name != "bob" {
		t.Errorf("bob: %q %v", name, err)
	}
	// After the TTL, alice's certificate is verified again.
	f.now = f.now.Add(10 * time.Second)
	if _, _, err := f.auth(t, request(alice, nil)); err != nil {
		t.Fatal(err)
	}
	if n := f.chain.calls.Load(); n != 3 {
		t.Errorf("the chain authenticated %d times, want 3", n)
	}
}

func TestCachedUserCannotBeChanged(t *testing.T) {
	f := newFixture(t)
	alice := f.clientCA.issue(t, "alice", []string{"dev"}, f.now.Add(time.Hour))
	resp, _, _ := f.cache.AuthenticateRequest(request(alice, nil))
	resp.User.(*user.DefaultInfo).Name = "mallory"
	resp.User.(*user.DefaultInfo).Groups[0] = user.SystemPrivilegedGroup
	if name, groups, err := f.auth(t, request(alice, nil)); err != nil || name != "alice" || groups[0] != "dev" {
		t.Errorf("cached user changed by a caller: %q %v %v", name, groups, err)
	}
}

func TestNoCachingPastNotAfter(t *testing.T) {
	f := newFixture(t)
	soon := f.clientCA.issue(t, "alice", nil, f.now.Add(2*time.Second))
	if _, _, err := f.auth(t, request(soon, nil)); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(3 * time.Second)
	f.cache.now = func() time.Time { return f.now }
	// The cache does not answer for an expired certificate; the chain (real time) still
	// accepts it here, so the call count shows the cache was bypassed.
	_, _, _ = f.auth(t, request(soon, nil))
	if n := f.chain.calls.Load(); n != 2 {
		t.Errorf("the chain authenticated %d times, want 2: the cache answered past NotAfter", n)
	}
}

func TestFailuresAndOtherCredentialsGoToTheChain(t *testing.T) {
	f := newFixture(t)
	stranger := newCA(t, "other-ca").issue(t, "eve", nil, f.now.Add(time.Hour))
	for range 2 {
		if _, _, err := f.auth(t, request(stranger, nil)); err == nil {
			t.Fatal("a certificate of an unknown CA authenticated")
		}
	}
	alice := f.clientCA.issue(t, "alice", nil, f.now.Add(time.Hour))
	for range 2 {
		if name, _, err := f.auth(t, request(alice, map[string]string{"Authorization": "Bearer good"})); err != nil || name != "alice" {
			t.Errorf("certificate and token: %q %v", name, err)
		}
	}
	if name, _, err := f.auth(t, request(nil, map[string]string{"Authorization": "Bearer good"})); err != nil || name != "token-user" {
		t.Errorf("token only: %q %v", name, err)
	}
	if n := f.chain.calls.Load(); n != 5 {
		t.Errorf("the chain authenticated %d times, want 5: failures and token requests are never cached", n)
	}
}

func TestFrontProxyIsVerifiedOnceButHeadersAreReadEachTime(t *testing.T) {
	f := newFixture(t)
	proxy := f.proxyCA.issue(t, "front-proxy-client", nil, f.now.Add(time.Hour))
	for _, who := range []string{"alice", "bob", "alice"} {
		req := request(proxy, map[string]string{"X-Remote-User": who, "X-Remote-Group": "team-" + who})
		name, groups, err := f.auth(t, req)
		if err != nil || name != who || len(groups) != 2 || groups[0] != "team-"+who || groups[1] != user.AllAuthenticated {
			t.Errorf("through the front proxy as %s: %q %v %v", who, name, groups, err)
		}
		if req.Header.Get("X-Remote-User") != "" {
			t.Error("the requestheader headers were not cleared")
		}
	}
	if n := f.chain.calls.Load(); n != 0 {
		t.Errorf("the chain authenticated %d times, want 0: the front proxy is verified by the cache", n)
	}

	// A certificate of the front-proxy CA with a name not allowed is not a front proxy.
	other := f.proxyCA.issue(t, "someone-else", nil, f.now.Add(time.Hour))
	if _, _, err := f.auth(t, request(other, map[string]string{"X-Remote-User": "alice"})); err == nil {
		t.Error("a certificate with a name not allowed authenticated as a front proxy")
	}
	// A user's certificate cannot name another user in the headers.
	mallory := f.clientCA.issue(t, "mallory", nil, f.now.Add(time.Hour))
	if name, _, err := f.auth(t, request(mallory, map[string]string{"X-Remote-User": "alice"})); err != nil || name != "mallory" {
		t.Errorf("a user's certificate with X-Remote-User: %q %v, want mallory", name, err)
	}
}

func TestFrontProxyCAChangeIsSeenAtOnce(t *testing.T) {
	f := newFixture(t)
	proxy := f.proxyCA.issue(t, "front-proxy-client", nil, f.now.Add(time.Hour))
	req := func() *http.Request { return request(proxy, map[string]string{"X-Remote-User": "alice"}) }
	if _, _, err := f.auth(t, req()); err != nil {
		t.Fatal(err)
	}
	f.rotateProxyCA(t, newCA(t, "new-front-proxy-ca").pem)
	if name, _, err := f.auth(t, req()); err == nil && name == "alice" {
		t.Error("the old front proxy still authenticates after its CA left the bundle")
	}

	f.rotateProxyCA(t, f.proxyCA.pem)
	if _, _, err := f.auth(t, req()); err != nil {
		t.Fatal(err)
	}
	f.allowedNames = []string{"another-proxy"}
	if name, _, err := f.auth(t, req()); err == nil && name == "alice" {
		t.Error("the front proxy still authenticates after its name left the allowed names")
	}
}

func TestZeroTTLDisablesTheCache(t *testing.T) {
	next := authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) { return nil, false, nil })
	if _, ok := CachingCertificates(next, nil, 0).(*certCache); ok {
		t.Error("a TTL of 0 still caches")
	}
}
