package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/felixge/httpsnoop"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	utilproxy "k8s.io/apimachinery/pkg/util/proxy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
)

// Proxier serves the mounts/<name>/proxy subresource.
type Proxier struct {
	Secrets    SecretSource
	Transports *Transports
	// Authorizer checks the extra "create" that upgrade requests need.
	Authorizer authorizer.Authorizer
	Metrics    *Metrics
	// Probes shares health probe results between mounts of one target.
	Probes *ProbeCache
}

// Reasons of a CredentialsError, also the reasons of the CredentialsResolved condition.
const (
	ReasonUnsupportedType    = "UnsupportedType"
	ReasonSecretNotFound     = "SecretNotFound"
	ReasonSecretUnavailable  = "SecretUnavailable"
	ReasonInvalidCredentials = "InvalidKubeconfig"
)

// CredentialsError says why a Mount's target credentials could not be resolved. It answers
// proxied requests with 503; its message never contains credential bytes.
type CredentialsError struct {
	Reason  string
	Message string
}

func (e *CredentialsError) Error() string { return e.Message }

// Status makes the error an API error (503).
func (e *CredentialsError) Status() metav1.Status {
	return apierrors.NewServiceUnavailable(e.Message).Status()
}

// Target resolves the Mount's target and its cached transports.
func (p *Proxier) Target(ctx context.Context, m *mounts.Mount) (*Target, error) {
	if m.Spec.Type != mounts.MountTypeURL {
		return nil, &CredentialsError{ReasonUnsupportedType, fmt.Sprintf("mount %q has type %s, which is served only in kcp mode; this server proxies type URL", m.Name, m.Spec.Type)}
	}
	ref := m.Spec.Ref
	secret, err := p.Secrets.GetSecret(ctx, ref.Namespace, ref.Name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &CredentialsError{ReasonSecretNotFound, fmt.Sprintf("mount %q: its Secret %s/%s does not exist", m.Name, ref.Namespace, ref.Name)}
		}
		return nil, &CredentialsError{ReasonSecretUnavailable, fmt.Sprintf("mount %q: %v", m.Name, err)}
	}
	key := TargetKey{SecretNamespace: ref.Namespace, SecretName: ref.Name, SecretResourceVersion: secret.ResourceVersion, CABundle: string(m.Spec.CABundle)}
	if t := m.Spec.Timeouts; t != nil && t.ConnectSeconds != nil {
		key.ConnectTimeout = time.Duration(*t.ConnectSeconds) * time.Second
	}
	target, err := p.Transports.Get(ctx, m.UID, key, func() (*rest.Config, error) {
		data, ok := secret.Data[v1alpha1.SecretKeyKubeconfig]
		if !ok {
			return nil, fmt.Errorf("%w: no key %q", ErrCredentials, v1alpha1.SecretKeyKubeconfig)
		}
		return ConfigFromKubeconfig(data)
	})
	if err != nil {
		return nil, &CredentialsError{ReasonInvalidCredentials, fmt.Sprintf("mount %q: Secret %s/%s: %v", m.Name, ref.Namespace, ref.Name, err)}
	}
	return target, nil
}

// Forget lets go of what the proxy keeps for a deleted mount: its share of a Target and its
// metric series. The registry calls it on the replica that served the delete, the status
// controller's informer on every replica; a second call does nothing.
func (p *Proxier) Forget(name string, uid types.UID) {
	if p.Transports != nil {
		p.Transports.Forget(uid)
	}
	p.Metrics.Forget(name, uid)
}

// Handler returns the handler of one proxied request to m at innerPath. Errors returned here
// are API errors the caller writes as they are.
func (p *Proxier) Handler(ctx context.Context, m *mounts.Mount, innerPath string) (http.Handler, error) {
	caller, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil, apierrors.NewUnauthorized("no user in the request")
	}
	imp, err := impersonation(m, caller)
	if err != nil {
		return nil, err
	}
	target, err := p.Target(ctx, m)
	if err != nil {
		return nil, err
	}
	joined, err := JoinPath(target.Base.Path, innerPath)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	location := &url.URL{Scheme: target.Base.Scheme, Host: target.Base.Host, Path: joined}
	var requestTimeout time.Duration
	if t := m.Spec.Timeouts; t != nil && t.RequestSeconds != nil {
		requestTimeout = time.Duration(*t.RequestSeconds) * time.Second
	}
	return &requestHandler{proxier: p, mount: m, caller: caller, imp: imp, target: target, location: location, innerPath: innerPath, requestTimeout: requestTimeout}, nil
}

// impersonation returns how the caller is carried to the target: nil for MountCredentials,
// the caller's identity (prefixed) for Impersonate. system:masters is never impersonated: a
// host's superuser is no superuser of every mounted cluster.
func impersonation(m *mounts.Mount, caller user.Info) (*transport.ImpersonationConfig, error) {
	id := m.Spec.Identity
	if id.Mode == mounts.IdentityModeMountCredentials {
		return nil, nil
	}
	if slices.Contains(caller.GetGroups(), user.SystemPrivilegedGroup) {
		return nil, apierrors.NewForbidden(mounts.Resource("mounts/proxy"), m.Name,
			fmt.Errorf("mount %q impersonates callers and refuses to impersonate members of %s; use an identity outside %s, or a mount with identity mode %s",
				m.Name, user.SystemPrivilegedGroup, user.SystemPrivilegedGroup, mounts.IdentityModeMountCredentials))
	}
	groups := make([]string, 0, len(caller.GetGroups()))
	for _, g := range caller.GetGroups() {
		groups = append(groups, id.GroupPrefix+g)
	}
	return &transport.ImpersonationConfig{
		UserName: id.UserPrefix + caller.GetName(),
		UID:      caller.GetUID(),
		Groups:   groups,
		Extra:    caller.GetExtra(),
	}, nil
}

type requestHandler struct {
	proxier        *Proxier
	mount          *mounts.Mount
	caller         user.Info
	imp            *transport.ImpersonationConfig
	target         *Target
	location       *url.URL
	innerPath      string
	requestTimeout time.Duration
}

// scrubbedHeaders never travel from the caller to the target: the caller's credentials and
// identity claims belong to this server, not to the mount's target.
var scrubbedHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie"}
var scrubbedPrefixes = []string{"Impersonate-", "X-Remote-"}

func (h *requestHandler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	metrics := h.proxier.Metrics
	recording := metrics.start(h.mount.Name, h.mount.UID)
	code := http.StatusOK
	var written int64
	w = httpsnoop.Wrap(w, httpsnoop.Hooks{
		WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
			return func(c int) { code = c; next(c) }
		},
		Write: func(next httpsnoop.WriteFunc) httpsnoop.WriteFunc {
			return func(b []byte) (int, error) { n, err := next(b); written += int64(n); return n, err }
		},
		ReadFrom: func(next httpsnoop.ReadFromFunc) httpsnoop.ReadFromFunc {
			return func(src io.Reader) (int64, error) { n, err := next(src); written += n; return n, err }
		},
	})
	defer func() { metrics.finish(recording, req.Method, code, written, time.Since(start)) }()

	ctx := withMount(req.Context(), h.mount.Name, h.mount.UID)
	upgrade := httpstream.IsUpgradeRequest(req)
	if upgrade {
		// A WebSocket exec is a GET; "get" on mounts/proxy must not be enough to run
		// commands on the target, so upgrades also need "create".
		if status := h.authorizeUpgrade(ctx); status != nil {
			s := status.Status()
			code = int(s.Code)
			writeStatus(w, &s)
			return
		}
	}
	if h.requestTimeout > 0 && !IsLongRunning(req, h.innerPath) {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.requestTimeout)
		defer cancel()
	}

	out := req.Clone(ctx)
	for _, name := range scrubbedHeaders {
		out.Header.Del(name)
	}
	for name := range out.Header {
		for _, prefix := range scrubbedPrefixes {
			if strings.HasPrefix(name, prefix) {
				out.Header.Del(name)
			}
		}
	}

	rt, upgradeRT := h.target.RoundTrippers(h.imp)
	// The upgrade path dials Location as it is; only the plain path copies the query itself.
	location := *h.location
	location.RawQuery = req.URL.RawQuery
	proxy := utilproxy.NewUpgradeAwareHandler(&location, rt, false, false, responder{mount: h.mount.Name, target: h.target.Base.Host})
	proxy.UpgradeTransport = upgradeRT
	proxy.UseLocationHost = true
	proxy.ServeHTTP(w, out)
}

func (h *requestHandler) authorizeUpgrade(ctx context.Context) apierrors.APIStatus {
	if h.proxier.Authorizer == nil {
		return nil
	}
	attrs := authorizer.AttributesRecord{
		User:            h.caller,
		Verb:            "create",
		APIGroup:        mounts.GroupName,
		APIVersion:      v1alpha1.SchemeGroupVersion.Version,
		Resource:        "mounts",
		Subresource:     "proxy",
		Name:            h.mount.Name,
		ResourceRequest: true,
	}
	decision, reason, err := h.proxier.Authorizer.Authorize(ctx, attrs)
	if decision == authorizer.DecisionAllow {
		return nil
	}
	if err != nil {
		reason = err.Error()
	}
	return apierrors.NewForbidden(mounts.Resource("mounts/proxy"), h.mount.Name,
		fmt.Errorf("upgrade requests (exec, attach, port-forward) also need verb \"create\" on mounts/proxy: %s", reason))
}

// responder writes failures to reach the target as metav1.Status.
type responder struct {
	mount, target string
}

func (r responder) Error(w http.ResponseWriter, req *http.Request, err error) {
	if errors.Is(err, context.Canceled) && req.Context().Err() != nil {
		return // the caller went away; nobody reads an answer
	}
	status := statusForError(r.target, err)
	klog.FromContext(req.Context()).V(2).Info("Proxying failed", "mount", r.mount, "code", status.Code, "err", err.Error())
	writeStatus(w, status)
}
