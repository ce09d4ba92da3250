package options

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	mountapiserver "github.com/kcp-dev/mount-apiserver/pkg/apiserver"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
	"github.com/kcp-dev/mount-apiserver/pkg/proxy"
	"github.com/kcp-dev/mount-apiserver/pkg/targetpolicy"
)

// config builds a real server configuration from options (an embedded etcd, the secure
// listener on 127.0.0.1, the proxy) and returns it with the options it came from.
func config(tb testing.TB, modify func(*Options)) (*mountapiserver.Config, *Options) {
	tb.Helper()
	_, ctx := ktesting.NewTestContext(tb)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	o := NewOptions()
	o.RootDirectory = tb.TempDir()
	o.SecureServing.Listener = listener
	o.SecureServing.BindPort = listener.Addr().(*net.TCPAddr).Port
	if modify != nil {
		modify(o)
	}
	completed, err := o.Complete()
	if err != nil {
		tb.Fatal(err)
	}
	if err := completed.Validate(); err != nil {
		tb.Fatal(err)
	}
	cfg, err := completed.Config(ctx)
	if err != nil {
		listener.Close()
		tb.Fatal(err)
	}
	return cfg, o
}

// serve builds a real server configuration (config) and serves it until the test ends. It
// returns the configuration, the secure address and the serving CA.
func serve(t *testing.T, modify func(*Options)) (*mountapiserver.Config, string, []byte) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	cfg, o := config(t, modify)
	listener := o.SecureServing.Listener
	ca, err := os.ReadFile(filepath.Join(o.RootDirectory, pkiDir, pki.CACertFile))
	if err != nil {
		cfg.Close()
		t.Fatal(err)
	}
	// Serve the secure port with the server's handler chain, so a request that got through
	// would be answered by this server itself. Run stops the embedded etcd when it returns.
	server, err := cfg.Complete().New()
	if err != nil {
		cfg.Close()
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = server.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	return cfg, listener.Addr().String(), ca
}

// throughProxy sends GET /version to target through a mount's transport of cfg's proxy, as
// the proxy would; it returns the error that refused it, or fails the test with what answered.
func throughProxy(t *testing.T, cfg *mountapiserver.Config, name string, target *rest.Config) error {
	t.Helper()
	tgt, err := cfg.Extra.Proxier.Transports.Get(context.Background(), types.UID("uid-"+name), proxy.TargetKey{SecretName: name}, func() (*rest.Config, error) { return target, nil })
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, target.Host+"/version", nil)
	rt, _ := tgt.RoundTrippers(nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	t.Errorf("%s answered %d through the proxy's transport: %s", name, resp.StatusCode, body)
	return nil
}

func classOf(err error) targetpolicy.Class {
	var pe *targetpolicy.Error
	if errors.As(err, &pe) {
		return pe.Class
	}
	return ""
}

// TestOwnEndpointsAreRefused aims mounts at the server's own endpoints with everything a
// tenant could know. The embedded etcd serves plain http on loopback: a mount of it would
// read etcd's endpoints (and its peer port takes raft messages); a mount of the secure port
// loops back into this server. By default plain http alone refuses etcd; with plain http
// allowed, the own-endpoint rule still does.
func TestOwnEndpointsAreRefused(t *testing.T) {
	cfg, secure, ca := serve(t, nil)
	etcd := &rest.Config{Host: cfg.Extra.EmbeddedEtcd.ClientURL, BearerToken: "t"}
	if err := throughProxy(t, cfg, "etcd-default", etcd); classOf(err) != targetpolicy.ClassPlainHTTP {
		t.Errorf("embedded etcd with the default policy: %v, want refused as plain http", err)
	}
	err := throughProxy(t, cfg, "secure port", &rest.Config{Host: "https://" + secure, BearerToken: "t", TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
	if classOf(err) != targetpolicy.ClassOwnEndpoint {
		t.Errorf("secure port: %v, want refused as this server's own endpoint", err)
	}

	cfg, _, _ = serve(t, func(o *Options) { o.ProxyAllowPlainHTTP = true })
	for name, host := range map[string]string{"etcd client URL": cfg.Extra.EmbeddedEtcd.ClientURL, "etcd peer URL": cfg.Extra.EmbeddedEtcd.PeerURL} {
		if err := throughProxy(t, cfg, name, &rest.Config{Host: host, BearerToken: "t"}); classOf(err) != targetpolicy.ClassOwnEndpoint {
			t.Errorf("%s with plain http allowed: %v, want refused as this server's own endpoint", name, err)
		}
	}
}

func TestTargetFlags(t *testing.T) {
	o := NewOptions()
	fss := o.Flags()
	fs := fss.FlagSet("mount-apiserver")
	if err := fs.Parse([]string{"--proxy-allowed-targets=10.0.0.0/8,*.example.com:443", "--proxy-denied-targets=10.9.0.0/16", "--proxy-allow-plain-http"}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.ProxyAllowedTargets, " ") != "10.0.0.0/8 *.example.com:443" || strings.Join(o.ProxyDeniedTargets, " ") != "10.9.0.0/16" || !o.ProxyAllowPlainHTTP {
		t.Errorf("parsed: allowed %q, denied %q, plain http %v", o.ProxyAllowedTargets, o.ProxyDeniedTargets, o.ProxyAllowPlainHTTP)
	}

	o = NewOptions()
	o.RootDirectory = t.TempDir()
	o.ProxyAllowedTargets = []string{"10.0.0.0/33", "api.example.com"}
	o.ProxyDeniedTargets = []string{"http://metadata"}
	completed, err := o.Complete()
	if err != nil {
		t.Fatal(err)
	}
	err = completed.Validate()
	for _, want := range []string{`--proxy-allowed-targets: "10.0.0.0/33" is not a CIDR`, `--proxy-denied-targets: "http://metadata"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "api.example.com") {
		t.Errorf("Validate names a valid entry: %v", err)
	}
}
