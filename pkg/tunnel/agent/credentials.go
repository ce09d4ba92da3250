package agent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/httpstream"
	utilproxy "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/deadpeer"
)

// CredentialsProxy is the agent's HTTP proxy in Agent-credential mode, served on
// tunnel.AddressAgent: the hub sends plain HTTP through the session with the caller's
// Impersonate-* headers and no credentials; this adds the agent's own credentials (its
// ServiceAccount in-cluster, or --kubeconfig) and forwards to the target. The hub never acts
// as the agent itself: a request without Impersonate-User is refused.
type CredentialsProxy struct {
	base *url.URL
	// plain carries plain requests with the agent's credentials (keep-alives, HTTP/2).
	plain http.RoundTripper
	// upgrade dials upgrade requests over HTTP/1.1; upgradeAuth adds the agent's credentials.
	upgrade     *http.Transport
	upgradeAuth http.RoundTripper
	reverse     *httputil.ReverseProxy
}

// NewCredentialsProxy returns the proxy that forwards to cfg's host with cfg's credentials.
// cfg must not impersonate anyone itself: the callers' impersonation is what it adds.
func NewCredentialsProxy(cfg *rest.Config) (*CredentialsProxy, error) {
	if cfg.Impersonate.UserName != "" || cfg.Impersonate.UID != "" || len(cfg.Impersonate.Groups) > 0 || len(cfg.Impersonate.Extra) > 0 {
		return nil, errors.New("the agent's target credentials impersonate someone already; the agent impersonates each caller, so they must not")
	}
	base, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("target URL %q: %w", cfg.Host, err)
	}
	if base.Scheme != "https" && base.Scheme != "http" || base.Host == "" {
		return nil, fmt.Errorf("target URL %q: want https://host[:port]", cfg.Host)
	}
	cfg = rest.CopyConfig(cfg)
	plain, err := rest.TransportFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("target transport: %w", err)
	}
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("target TLS settings: %w", err)
	}
	if tlsConfig == nil && base.Scheme == "https" {
		// Without one the upgrade dialer would not verify the target.
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if tlsConfig != nil {
		tlsConfig = tlsConfig.Clone()
		// SPDY and WebSocket upgrades need HTTP/1.1.
		tlsConfig.NextProtos = []string{"http/1.1"}
	}
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	upgrade := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Upgrades have no HTTP/2 pings; see pkg/deadpeer.
			return deadpeer.TuneOrLog(ctx, conn), nil
		},
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: -1,
	}
	upgradeAuth, err := rest.HTTPWrappersForConfig(cfg, utilproxy.MirrorRequest)
	if err != nil {
		return nil, fmt.Errorf("target credentials: %w", err)
	}
	p := &CredentialsProxy{base: base, plain: plain, upgrade: upgrade, upgradeAuth: upgradeAuth}
	p.reverse = &httputil.ReverseProxy{
		Rewrite:   func(*httputil.ProxyRequest) {}, // the request is complete when it gets here
		Transport: plain,
		// Watches and logs -f: every write reaches the hub at once.
		FlushInterval: -1,
		ErrorHandler:  p.targetError,
	}
	return p, nil
}

// ReasonBadGateway is the Status reason of a target the agent could not reach.
const ReasonBadGateway metav1.StatusReason = "BadGateway"

// scrubbed headers never reach the target: the agent's credentials are the only ones, and
// hop-by-hop headers describe the hub's connection.
var scrubbed = []string{"Authorization", "Proxy-Authorization", "Cookie",
	"Connection", "Proxy-Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *CredentialsProxy) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	if req.Header.Get(transport.ImpersonateUserHeader) == "" {
		writeStatus(w, apierrors.NewForbidden(schema.GroupResource{}, "", errors.New(
			"the agent forwards only requests that impersonate their caller (Impersonate-User is missing); it never acts as its own identity for the hub")))
		return
	}
	for _, g := range req.Header.Values(transport.ImpersonateGroupHeader) {
		if g == user.SystemPrivilegedGroup {
			writeStatus(w, apierrors.NewForbidden(schema.GroupResource{}, "", fmt.Errorf(
				"the agent never impersonates group %s", user.SystemPrivilegedGroup)))
			return
		}
	}
	if req.URL.Path == "" || !strings.HasPrefix(req.URL.Path, "/") || strings.Contains(req.URL.Path, "/../") || strings.HasSuffix(req.URL.Path, "/..") {
		writeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("path %q is not an absolute, clean path", req.URL.Path)))
		return
	}

	upgrade := httpstream.IsUpgradeRequest(req)
	out := req.Clone(ctx)
	scrub(out.Header, upgrade)
	location := *p.base
	location.Path = strings.TrimSuffix(p.base.Path, "/") + req.URL.Path
	location.RawPath = ""
	location.RawQuery = req.URL.RawQuery
	out.URL = &location
	out.Host = location.Host
	out.RequestURI = ""

	if !upgrade {
		p.reverse.ServeHTTP(w, out)
		return
	}
	h := utilproxy.NewUpgradeAwareHandler(&location, p.plain, false, false, responder{p})
	h.UpgradeTransport = utilproxy.NewUpgradeRequestRoundTripper(p.upgrade, p.upgradeAuth)
	h.UseLocationHost = true
	h.ServeHTTP(w, out)
}

// scrub removes what must not reach the target, and the headers named in Connection, so the
// sender cannot make the agent drop the impersonation headers. An upgrade keeps exactly
// "Connection: Upgrade" and its protocol.
func scrub(h http.Header, upgrade bool) {
	protocols := h.Values("Upgrade")
	for _, value := range h.Values("Connection") {
		for name := range strings.SplitSeq(value, ",") {
			if name = textproto.TrimString(name); name != "" && !strings.HasPrefix(textproto.CanonicalMIMEHeaderKey(name), "Impersonate-") {
				h.Del(name)
			}
		}
	}
	for _, name := range scrubbed {
		h.Del(name)
	}
	for name := range h {
		if strings.HasPrefix(name, "X-Remote-") {
			h.Del(name)
		}
	}
	if upgrade {
		h.Set("Connection", "Upgrade")
		h["Upgrade"] = protocols
	}
}

func (p *CredentialsProxy) targetError(w http.ResponseWriter, req *http.Request, err error) {
	if errors.Is(err, context.Canceled) && req.Context().Err() != nil {
		return // the hub went away; nobody reads an answer
	}
	// The root cause goes to the agent's log only: the answer says what failed, not what
	// answered, so the tunnel is no scanner of the agent's network.
	klog.FromContext(req.Context()).V(2).Info("Forwarding to the target failed", "target", p.base.Host, "err", err.Error())
	status := metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusBadGateway,
		Reason:  ReasonBadGateway,
		Message: fmt.Sprintf("the agent could not reach its target %s", p.base.Host),
	}
	writeStatusObject(w, &status)
}

type responder struct{ p *CredentialsProxy }

func (r responder) Error(w http.ResponseWriter, req *http.Request, err error) {
	r.p.targetError(w, req, err)
}

func writeStatus(w http.ResponseWriter, err apierrors.APIStatus) {
	s := err.Status()
	writeStatusObject(w, &s)
}

func writeStatusObject(w http.ResponseWriter, s *metav1.Status) {
	s.Kind, s.APIVersion = "Status", "v1"
	data, err := json.Marshal(s)
	if err != nil {
		http.Error(w, s.Message, int(s.Code))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(int(s.Code))
	_, _ = w.Write(data)
}

// NewCredentialsHandler is the Options.NewAgentHandler of mount-agent: the CredentialsProxy
// with --kubeconfig, or in a pod with its ServiceAccount; nil (the agent answers 503 on
// tunnel.AddressAgent) when it has neither. The credentials must be for --target itself, so
// that the agent still reaches only its one target.
func NewCredentialsHandler(o *CompletedOptions) (http.Handler, error) {
	var cfg *rest.Config
	var err error
	switch {
	case o.Kubeconfig != "":
		if cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
	case o.InCluster:
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("in-cluster credentials: %w", err)
		}
	default:
		return nil, nil
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("target credentials: server %q: %w", cfg.Host, err)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	if host != o.Target {
		if o.Kubeconfig == "" {
			// The pod's own credentials are for the in-cluster kube-apiserver, and --target
			// names another: serve Server-credential mounts, and answer Agent ones with 503.
			klog.Background().Info("The pod's ServiceAccount is not for --target: mounts with Agent credentials are not served", "credentials", host, "target", o.Target)
			return nil, nil
		}
		return nil, fmt.Errorf("--kubeconfig is for %s, not for --target %s: the agent reaches only its one target", host, o.Target)
	}
	p, err := NewCredentialsProxy(cfg)
	if err != nil {
		return nil, err
	}
	return p, nil
}
