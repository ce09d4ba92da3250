package proxy

import (
	"context"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilproxy "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/targetpolicy"
)

// countingServer counts the requests that reach it; a refused target must see none.
func countingServer(t *testing.T, tlsServer bool, body string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, body)
	})
	var s *httptest.Server
	if tlsServer {
		s = httptest.NewTLSServer(h)
	} else {
		s = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s, &hits
}

func get(t *testing.T, target *Target, path string) (*http.Response, error) {
	t.Helper()
	return getWith(context.Background(), t, target, path)
}

// getWith is get within ctx (a client trace, say).
func getWith(ctx context.Context, t *testing.T, target *Target, path string) (*http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	t.Cleanup(cancel)
	u := *target.Base
	u.Path = path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := target.RoundTrippers(nil)
	return rt.RoundTrip(req)
}

// A plain-http target on loopback (a metadata service, say) is refused by default: the
// mount's token would travel in cleartext and the proxy would read any internal HTTP endpoint.
// The operator may allow plain http.
func TestDefaultTransportsRefusePlainHTTP(t *testing.T) {
	metadata, hits := countingServer(t, false, "instance-secret")
	build := func() (*rest.Config, error) { return &rest.Config{Host: metadata.URL, BearerToken: "mount-token"}, nil }
	tr := NewTransports(TransportOptions{}, nil)
	target, err := tr.Get(context.Background(), "uid", TargetKey{SecretName: "plain"}, build)
	if err == nil {
		resp, rerr := get(t, target, "/latest/meta-data")
		if rerr == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Fatalf("plain http target answered %d %q through the proxy's transport; the mount's token went in cleartext", resp.StatusCode, body)
		}
		t.Fatalf("plain http target: transport built, round trip failed with %v; want the target refused when the transport is built", rerr)
	}
	if !errors.Is(err, targetpolicy.ErrNotAllowed) || classOf(err) != targetpolicy.ClassPlainHTTP || strings.Contains(err.Error(), "mount-token") {
		t.Errorf("plain http target refused with %v, want the plain http class", err)
	}
	if hits.Load() != 0 {
		t.Errorf("the plain http target saw %d requests", hits.Load())
	}

	allowing := NewTransports(TransportOptions{Policy: targetpolicy.New(targetpolicy.Config{AllowPlainHTTP: true})}, nil)
	target, err = allowing.Get(context.Background(), "uid", TargetKey{SecretName: "plain"}, build)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := get(t, target, "/version")
	if err != nil {
		t.Fatalf("plain http allowed by the operator: %v", err)
	}
	resp.Body.Close()
	if hits.Load() != 1 {
		t.Errorf("plain http allowed: %d requests at the target, want 1", hits.Load())
	}
}

func classOf(err error) targetpolicy.Class {
	var pe *targetpolicy.Error
	if errors.As(err, &pe) {
		return pe.Class
	}
	return ""
}

// acceptCounter is a real loopback listener that counts the connections it accepts.
func acceptCounter(t *testing.T) (net.Listener, *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var n atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return l, &n
}

// The dial-time check runs on the address actually connected to, before connecting: a name
// the URL check cannot decide is refused once it resolves to a denied address, and the
// listener never sees a connection. The same dial without the deny entry connects.
func TestDialChecksTheAddressConnectedTo(t *testing.T) {
	l, accepted := acceptCounter(t)
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	denied, err := targetpolicy.ParseRules([]string{"127.0.0.1:" + port, "[::1]:" + port})
	if err != nil {
		t.Fatal(err)
	}
	policy := targetpolicy.New(targetpolicy.Config{Denied: denied})
	target := "localhost:" + port
	if err := policy.CheckURL(&url.URL{Scheme: "https", Host: target}); err != nil {
		t.Fatalf("the name alone is not denied, yet: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := dialAllowed(ctx, net.Dialer{}, policy, "tcp", target)
	if err == nil {
		conn.Close()
		t.Fatal("dial to a denied address succeeded")
	}
	if classOf(err) != targetpolicy.ClassDenied {
		t.Errorf("dial refused with %v, want the denied class", err)
	}
	// Through a mount's transport, and as the caller sees it: 403, naming the target as the
	// mount names it, not the address it resolved to.
	tr := NewTransports(TransportOptions{Policy: policy}, nil)
	tgt, err := tr.Get(context.Background(), "uid", TargetKey{SecretName: "named"}, func() (*rest.Config, error) {
		return &rest.Config{Host: "https://" + target, BearerToken: "mount-token"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = get(t, tgt, "/version")
	if s := statusForError(tgt.Base.Host, err); s.Code != http.StatusForbidden || !strings.Contains(s.Message, "localhost:"+port) || strings.Contains(s.Message, "127.0.0.1") {
		t.Errorf("refused dial through the transport: %v -> %d %q", err, s.Code, s.Message)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the listener accepted %d connections to a denied address", n)
	}

	conn, err = dialAllowed(ctx, net.Dialer{}, targetpolicy.New(targetpolicy.Config{}), "tcp", "127.0.0.1:"+port)
	if err != nil {
		t.Fatalf("allowed dial: %v", err)
	}
	conn.Close()
	if err := poll(func() bool { return accepted.Load() == 1 }); err != nil {
		t.Errorf("the listener accepted %d connections, want the allowed one", accepted.Load())
	}
}

func poll(cond func() bool) error {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return nil
		}
	}
	return errors.New("timed out")
}

// A target that presents this server's own serving certificate is this server, whatever
// address led there: refused during the handshake, on plain requests and upgrades, before a
// request is written.
func TestOwnCertificateIsRefused(t *testing.T) {
	self, hits := countingServer(t, true, "")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: self.Certificate().Raw})
	policy := targetpolicy.New(targetpolicy.Config{OwnCertificates: func() [][]byte { return [][]byte{self.Certificate().Raw} }})
	tr := NewTransports(TransportOptions{Policy: policy}, nil)
	tgt, err := tr.Get(context.Background(), "uid", TargetKey{SecretName: "self", CABundle: string(caPEM)}, func() (*rest.Config, error) {
		return &rest.Config{Host: self.URL, BearerToken: "mount-token"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = get(t, tgt, "/version")
	if classOf(err) != targetpolicy.ClassOwnCertificate {
		t.Errorf("plain request to this server's certificate: %v", err)
	}
	if s := statusForError(tgt.Base.Host, err); s.Code != http.StatusForbidden {
		t.Errorf("status %d %q, want 403", s.Code, s.Message)
	}
	_, upgrade := tgt.RoundTrippers(nil)
	u, _ := url.Parse(self.URL + "/api/v1/namespaces/default/pods/p/exec")
	if conn, err := utilproxy.DialURL(context.Background(), u, upgrade); classOf(err) != targetpolicy.ClassOwnCertificate {
		if conn != nil {
			conn.Close()
		}
		t.Errorf("upgrade dial to this server's certificate: %v", err)
	}
	if hits.Load() != 0 {
		t.Errorf("this server's stand-in saw %d requests", hits.Load())
	}
}

// A kubeconfig without certificate-authority-data (a target with a publicly trusted
// certificate) still verifies the target on every path, upgrades (exec, attach,
// port-forward) included: the mount's token must not go to whoever answers.
func TestUpgradesVerifyTargetsWithoutCAData(t *testing.T) {
	untrusted, hits := countingServer(t, true, "")
	tr := NewTransports(TransportOptions{}, nil)
	target, err := tr.Get(context.Background(), "uid", TargetKey{SecretName: "no-ca"}, func() (*rest.Config, error) {
		return &rest.Config{Host: untrusted.URL, BearerToken: "mount-token"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := get(t, target, "/version"); err == nil {
		resp.Body.Close()
		t.Errorf("plain request to a target whose certificate no root trusts: %d, want a verification error", resp.StatusCode)
	}
	_, upgrade := target.RoundTrippers(nil)
	u, _ := url.Parse(untrusted.URL + "/api/v1/namespaces/default/pods/p/exec")
	conn, err := utilproxy.DialURL(context.Background(), u, upgrade)
	if err == nil {
		conn.Close()
		t.Errorf("upgrade dial to a target whose certificate no root trusts succeeded: TLS verification was off")
	}
	if hits.Load() != 0 {
		t.Errorf("the untrusted target saw %d requests", hits.Load())
	}
}

// spec.caBundle replaces the kubeconfig's CA also when the kubeconfig has none.
func TestCABundleAppliesWithoutCAData(t *testing.T) {
	target, hits := countingServer(t, true, "ok")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: target.Certificate().Raw})
	tr := NewTransports(TransportOptions{}, nil)
	tgt, err := tr.Get(context.Background(), "uid", TargetKey{SecretName: "no-ca", CABundle: string(caPEM)}, func() (*rest.Config, error) {
		return &rest.Config{Host: target.URL, BearerToken: "mount-token"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := get(t, tgt, "/version")
	if err != nil {
		t.Fatalf("spec.caBundle trusts the target, yet: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || hits.Load() != 1 {
		t.Errorf("status %d, %d requests at the target", resp.StatusCode, hits.Load())
	}
}

// TestTargetResumesTLSSessions: a Target's new connection to its target resumes the TLS
// session of its last one (a Kubernetes API server closes idle connections after 90 s, and
// status probes of many mounts come less often), while another Target of the same server,
// other credentials, starts afresh: sessions are never shared between Targets.
func TestTargetResumesTLSSessions(t *testing.T) {
	target, _ := countingServer(t, true, "ok")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: target.Certificate().Raw})
	tr := NewTransports(TransportOptions{}, nil)
	build := func(token string) func() (*rest.Config, error) {
		return func() (*rest.Config, error) {
			return &rest.Config{Host: target.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}, nil
		}
	}
	resumed := func(tgt *Target) bool {
		t.Helper()
		resp, err := get(t, tgt, "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.TLS == nil {
			t.Fatal("no TLS state on the response")
		}
		return resp.TLS.DidResume
	}
	first, err := tr.Get(context.Background(), "uid-1", TargetKey{SecretName: "one"}, build("one"))
	if err != nil {
		t.Fatal(err)
	}
	if resumed(first) {
		t.Fatal("the first connection resumed a session")
	}
	first.plain.CloseIdleConnections()
	if !resumed(first) {
		t.Fatal("a new connection of the same Target made a full handshake instead of resuming")
	}
	other, err := tr.Get(context.Background(), "uid-2", TargetKey{SecretName: "two"}, build("two"))
	if err != nil {
		t.Fatal(err)
	}
	if resumed(other) {
		t.Fatal("another Target resumed the first one's session")
	}
}

// TestCloseIdleConnectionsOfAMount: the next request after CloseIdleConnections dials afresh;
// a mount without a cached Target closes nothing and builds none; a Target another mount
// shares keeps its connections.
func TestCloseIdleConnectionsOfAMount(t *testing.T) {
	target, _ := countingServer(t, true, "ok")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: target.Certificate().Raw})
	tr := NewTransports(TransportOptions{}, nil)
	p := &Proxier{Transports: tr}
	tgt, err := tr.Get(context.Background(), "uid", TargetKey{SecretName: "one"}, func() (*rest.Config, error) {
		return &rest.Config{Host: target.URL, BearerToken: "t", TLSClientConfig: rest.TLSClientConfig{CAData: caPEM}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	reused := func() bool {
		t.Helper()
		var got httptrace.GotConnInfo
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { got = i }})
		resp, err := getWith(ctx, t, tgt, "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return got.Reused
	}
	if reused() || !reused() {
		t.Fatal("want a new connection, then the same one again")
	}
	p.CloseIdleConnections(&mounts.Mount{ObjectMeta: metav1.ObjectMeta{UID: "other"}})
	if !reused() {
		t.Fatal("closing another mount's idle connections closed this one's")
	}
	p.CloseIdleConnections(&mounts.Mount{ObjectMeta: metav1.ObjectMeta{UID: "uid"}})
	if reused() {
		t.Fatal("the request after CloseIdleConnections reused the closed connection")
	}
	if n := tr.Len(); n != 1 {
		t.Fatalf("%d Targets cached, want 1", n)
	}
	if _, err := tr.Get(context.Background(), "sharing", TargetKey{SecretName: "one"}, func() (*rest.Config, error) {
		t.Fatal("a second mount of the key built its own Target")
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	_ = reused()
	p.CloseIdleConnections(&mounts.Mount{ObjectMeta: metav1.ObjectMeta{UID: "uid"}})
	if !reused() {
		t.Fatal("closing one mount's idle connections closed those of a Target another mount shares")
	}
}
