package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/dryrun"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
	"github.com/kcp-dev/mount-apiserver/pkg/targetpolicy"
)

// Reasons of a CredentialsError of Workspace and Redirect mounts: their target workspace
// could not be used. All answer 503: a workspace may appear, become ready, or kcp answer again.
const (
	ReasonWorkspaceNotFound    = "WorkspaceNotFound"
	ReasonWorkspaceNotReady    = "WorkspaceNotReady"
	ReasonWorkspaceUnavailable = "WorkspaceUnavailable"
	// ReasonKcpCredentials: the server's own kcp credentials (--kcp-kubeconfig) are unusable.
	ReasonKcpCredentials = "KcpCredentialsUnusable"
)

// TargetProviderKcp is TargetKey.Provider of the one Target that all Workspace mounts share:
// kcp's base URL with the provider's credentials. The workspace is a path below it, so one
// connection pool to kcp serves every workspace.
const TargetProviderKcp = "kcp"

// workspaceHandler proxies to the mount's workspace under the caller's identity.
func (p *Proxier) workspaceHandler(ctx context.Context, m *mounts.Mount, caller user.Info, innerPath string) (http.Handler, error) {
	if p.Workspaces == nil || p.Kcp == nil {
		return nil, unsupportedType(m)
	}
	// The provider's kcp identity reaches every workspace it was granted; lending it as it is
	// to whoever may proxy through one mount would hand out all of them.
	if m.Spec.Identity.Mode == mounts.IdentityModeMountCredentials {
		return nil, apierrors.NewForbidden(mounts.Resource("mounts/proxy"), m.Name,
			fmt.Errorf("mount %q has type %s and identity mode %s: Workspace mounts always reach their workspace under the caller's identity (mode %s), the server's kcp credentials are never lent",
				m.Name, m.Spec.Type, mounts.IdentityModeMountCredentials, mounts.IdentityModeImpersonate))
	}
	imp, err := impersonation(m, caller)
	if err != nil {
		return nil, err
	}
	ws, err := p.resolveWorkspace(ctx, m)
	if err != nil {
		return nil, err
	}
	target, err := p.kcpTarget(ctx, m)
	if err != nil {
		return nil, err
	}
	// The workspace is addressed below the configured kcp base URL, never at the URL the
	// Workspace object publishes: an object field must not choose where the provider's
	// credentials go. A mounted workspace has no logical cluster; kcp serves it by its path.
	cluster := string(ws.Cluster)
	if cluster == "" {
		cluster = ws.Path
	}
	base := strings.TrimSuffix(target.Base.Path, "/") + "/clusters/" + cluster
	joined, err := JoinPath(base, innerPath)
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

// kcpTarget is the shared Target of kcp's base URL with the provider's credentials.
func (p *Proxier) kcpTarget(ctx context.Context, m *mounts.Mount) (*Target, error) {
	key := TargetKey{Provider: TargetProviderKcp}
	if t := m.Spec.Timeouts; t != nil && t.ConnectSeconds != nil {
		key.ConnectTimeout = time.Duration(*t.ConnectSeconds) * time.Second
	}
	target, err := p.Transports.Get(ctx, m.UID, key, func() (*rest.Config, error) { return rest.CopyConfig(p.Kcp), nil })
	if err != nil {
		if errors.Is(err, targetpolicy.ErrNotAllowed) {
			return nil, &CredentialsError{ReasonTargetNotAllowed, fmt.Sprintf("mount %q: kcp: %v", m.Name, err)}
		}
		klog.FromContext(ctx).Error(err, "The server's kcp credentials are unusable", "mount", m.Name)
		return nil, &CredentialsError{ReasonKcpCredentials, fmt.Sprintf("mount %q: this server's kcp credentials (--kcp-kubeconfig) are unusable; its log says why", m.Name)}
	}
	return target, nil
}

// resolveWorkspace resolves the mount's workspace and requires it ready. Failures are
// CredentialsErrors (503) whose messages say which workspace and what is wrong with it, but
// not what kcp's transport reported (that goes to the log).
func (p *Proxier) resolveWorkspace(ctx context.Context, m *mounts.Mount) (kcp.Workspace, error) {
	path := m.Spec.Ref.Name
	ws, err := p.Workspaces.ResolveWorkspace(ctx, path)
	var status apierrors.APIStatus
	switch {
	case err == nil:
	case apierrors.IsNotFound(err):
		return ws, &CredentialsError{ReasonWorkspaceNotFound, fmt.Sprintf("mount %q: workspace %s does not exist", m.Name, path)}
	case apierrors.IsForbidden(err):
		return ws, &CredentialsError{ReasonWorkspaceNotFound, fmt.Sprintf("mount %q: kcp does not let this server see workspace %s (the provider needs get on workspaces in its parent); it may not exist", m.Name, path)}
	case apierrors.IsUnauthorized(err):
		return ws, &CredentialsError{ReasonKcpCredentials, fmt.Sprintf("mount %q: kcp does not accept this server's kcp credentials (--kcp-kubeconfig) to resolve workspace %s", m.Name, path)}
	case apierrors.IsBadRequest(err):
		return ws, &CredentialsError{ReasonWorkspaceNotFound, fmt.Sprintf("mount %q: %v", m.Name, err)}
	case errors.As(err, &status):
		return ws, &CredentialsError{ReasonWorkspaceUnavailable, fmt.Sprintf("mount %q: cannot resolve workspace %s: kcp answered %d", m.Name, path, status.Status().Code)}
	default:
		return ws, &CredentialsError{ReasonWorkspaceUnavailable, fmt.Sprintf("mount %q: cannot resolve workspace %s: kcp did not answer", m.Name, path)}
	}
	if !ws.Ready {
		return ws, &CredentialsError{ReasonWorkspaceNotReady, fmt.Sprintf("mount %q: %s", m.Name, ws.Message)}
	}
	return ws, nil
}

// redirectHandler answers with a redirect to the mount's workspace. No credentials of this
// server are involved: the caller's client follows the redirect with its own.
func (p *Proxier) redirectHandler(ctx context.Context, m *mounts.Mount, innerPath string) (http.Handler, error) {
	if p.Workspaces == nil {
		return nil, unsupportedType(m)
	}
	ws, err := p.resolveWorkspace(ctx, m)
	if err != nil {
		return nil, err
	}
	location, err := RedirectLocation(ws.URL, innerPath)
	if err != nil {
		var bad *badWorkspaceURLError
		if errors.As(err, &bad) {
			return nil, &CredentialsError{ReasonWorkspaceUnavailable, fmt.Sprintf("mount %q: %v", m.Name, err)}
		}
		return nil, apierrors.NewBadRequest(err.Error())
	}
	return &redirect{proxier: p, mount: m, location: location, workspace: ws.Path}, nil
}

type badWorkspaceURLError struct{ msg string }

func (e *badWorkspaceURLError) Error() string { return e.msg }

// RedirectLocation is where a Redirect mount sends a request for innerPath: the workspace's
// URL as kcp publishes it with innerPath joined below its path (JoinPath's rules: nothing
// escapes the workspace). The request's query is added per request. Only https URLs are
// used: clients follow a redirect with their credentials.
func RedirectLocation(workspaceURL, innerPath string) (*url.URL, error) {
	u, err := url.Parse(workspaceURL)
	switch {
	case workspaceURL == "":
		return nil, &badWorkspaceURLError{"kcp publishes no URL for the workspace yet"}
	case err != nil:
		return nil, &badWorkspaceURLError{"the URL kcp publishes for the workspace does not parse"}
	case u.Scheme != "https" || u.Host == "" || u.User != nil:
		return nil, &badWorkspaceURLError{"the URL kcp publishes for the workspace is not an https URL without credentials"}
	}
	joined, err := JoinPath(u.Path, innerPath)
	if err != nil {
		return nil, err
	}
	return &url.URL{Scheme: u.Scheme, Host: u.Host, Path: joined}, nil
}

// redirect answers 307 Temporary Redirect: clients repeat the request, with its method and
// body, at Location. net/http (so client-go and kubectl) follows a 307 for every method when
// it can send the body again, which client-go's requests can, up to 10 times. It copies
// Authorization and Cookie headers only to the same host or its subdomains; but client-go
// adds bearer tokens, impersonation and client certificates in its transport, on every
// request, so a client-go client presents its credentials to the workspace's host too. That
// is the point of a Redirect mount: the caller reaches the workspace as itself. Upgrades of
// kubectl exec and port-forward do not follow redirects.
type redirect struct {
	proxier   *Proxier
	mount     *mounts.Mount
	location  *url.URL
	workspace string
}

func (h *redirect) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	// Labelled as the mount's other series, which Forget deletes: <cluster>/<name> in kcp mode.
	recording := h.proxier.Metrics.start(h.proxier.metricsLabel(clusters.From(req.Context()), h.mount.Name), h.mount.UID)
	location := *h.location
	location.RawQuery = dryrun.Restore(req.URL.RawQuery)
	w.Header().Set("Location", location.String())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusTemporaryRedirect)
	body, _ := json.Marshal(&metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusSuccess,
		Code:     http.StatusTemporaryRedirect,
		Message:  fmt.Sprintf("mount %q redirects to workspace %s", h.mount.Name, h.workspace),
	})
	n, _ := w.Write(append(body, '\n'))
	h.proxier.Metrics.finish(recording, req.Method, http.StatusTemporaryRedirect, int64(n), time.Since(start))
}
