package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
	corev1alpha1 "github.com/kcp-dev/sdk/apis/core/v1alpha1"
	tenancyv1alpha1 "github.com/kcp-dev/sdk/apis/tenancy/v1alpha1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
)

// KcpVersion is the kcp whose behaviour the harness reproduces.
type KcpVersion string

const (
	// KcpV0323 forwards to the APIExport's virtual storage with the shard's client certificate
	// and no caller identity at all (DESIGN.md section 1, observed).
	KcpV0323 KcpVersion = "v0.32.3"
	// KcpMain adds X-Remote-User, -Group and -Extra-* over the same certificate.
	KcpMain KcpVersion = "main"
)

// Names the harness gives its parts.
const (
	// KcpExportPath and KcpExportName are the workspace and name of the mounts APIExport.
	KcpExportPath = "root"
	KcpExportName = "mounts.kcp.io"
	// KcpShardClientName is the common name of the shard's client certificate.
	KcpShardClientName = "kcp-shard"
	// KcpFrontProxyClientName is the common name of the front-proxy's requestheader
	// certificate.
	KcpFrontProxyClientName = "kcp-front-proxy"
	// KcpMountsMapping is the front-proxy path mapped to mount-apiserver.
	KcpMountsMapping = "/services/mounts"
	// KcpProviderUser is the identity of mount-apiserver in kcp (--kcp-kubeconfig).
	KcpProviderUser = "mount-provider"
)

// KcpWorkspace is a workspace of the harness: its content is a real kube-apiserver (RBAC,
// Secrets, access reviews, everything but Mounts), or, for a mounted workspace, a Mount.
type KcpWorkspace struct {
	Path    string
	Cluster string
	Kube    *KubeAPIServer
	// MountCluster and MountName name the Mount of a mounted workspace.
	MountCluster, MountName string
	// Bound says whether the workspace binds the mounts APIExport.
	Bound bool
}

// KcpUser is a user of the harness, authenticated by bearer token as kcp authenticates
// tokens.
type KcpUser struct {
	Name   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// KcpForwarded is a request the harness sent to mount-apiserver.
type KcpForwarded struct {
	Path   string
	Header http.Header
}

// KcpRequest is a request the harness served in a workspace: who authenticated (User), whom
// it acts as once kcp applied impersonation (As), and the path as the caller sent it.
type KcpRequest struct {
	Method, Path, User, As string
}

// KcpBindingListing says how the export's virtual workspace serves its APIBindingList.
type KcpBindingListing struct {
	// PageSize caps a page below the client's limit (0: the limit alone). kcp may answer
	// fewer items than the limit, with a continue token, as a filtered list does.
	PageSize int
	// FailEvery fails every FailEvery-th listing on its last page (0: none), as a storage
	// timeout fails one request: the earlier pages were served, the listing is partial.
	FailEvery int
}

// Kcp stands in for a kcp shard and its front-proxy on one loopback listener, reproducing
// exactly what DESIGN.md section 1 lists of kcp v0.32.3 (and of kcp main, by Version); a real
// kcp cannot be built here. What it does, per path:
//
//   - /clusters/<workspace path or logical cluster>/apis/mounts.kcp.io/...: the APIExport's
//     virtual storage. It authenticates the caller by token, authorizes the request with RBAC
//     in the workspace (a SubjectAccessReview in its kube-apiserver; mounts/proxy with the
//     request's verb), strips Authorization, Impersonate-* and X-Remote-*, and forwards to
//     mount-apiserver at /clusters/<logical cluster>/... with the shard's client certificate,
//     verifying mount-apiserver's serving certificate against its CA. kcp main adds X-Remote-*.
//     Discovery of the group is mount-apiserver's wildcard discovery, fetched live on every
//     request; without it the group does not exist.
//   - /clusters/<mounted workspace>/...: the front-proxy reads the Mount (phase Ready,
//     status.URL) and sends the request to status.URL: to its own virtual storage path as
//     standalone kcp does (headers unchanged), or through its /services/mounts mapping with
//     its requestheader certificate and X-Remote-* (Authorization stripped).
//   - /services/apiexport/root/mounts.kcp.io/clusters/<lc|*>/...: the APIExport's virtual
//     workspace for the provider only: claimed Secrets of bound workspaces, the export's
//     APIBindings (paged with limit and continue; SetBindingListing makes pages smaller or
//     listings fail), and Mounts.
//   - other /clusters/<workspace>/... paths: the workspace's own APIs (its kube-apiserver, with
//     impersonation of the authenticated caller), tenancy.kcp.io Workspaces of its children.
//
// A caller's Impersonate-* headers take effect in a workspace where its RBAC lets the caller
// impersonate (user, groups, UID, extras), as kcp applies impersonation itself. Unknown
// workspaces, unauthenticated callers, wildcard paths of consumers and unbound workspaces are
// refused as kcp refuses them. Requests and Forwarded tell a test what kcp served and what it
// sent to mount-apiserver.
type Kcp struct {
	Version KcpVersion
	URL     string
	// CA signs the harness's serving certificate.
	CA           *pki.CA
	ShardCA      *pki.CA
	FrontProxyCA *pki.CA
	Dir          string

	server     *httptest.Server
	shardCert  tls.Certificate
	fpCert     tls.Certificate
	mu         sync.Mutex
	workspaces map[string]*KcpWorkspace // by path and by cluster
	users      map[string]KcpUser       // by token
	mountURL   *url.URL
	shard      *http.Client
	frontProxy *http.Client
	forwarded  []KcpForwarded
	requests   []KcpRequest

	bindingListing                KcpBindingListing
	listingsBegun, listingsFailed int
}

// StartKcp starts the harness on 127.0.0.1 and stops it with t.Cleanup.
func StartKcp(t testing.TB, version KcpVersion) *Kcp {
	t.Helper()
	k := &Kcp{Version: version, Dir: t.TempDir(), workspaces: map[string]*KcpWorkspace{}, users: map[string]KcpUser{}}
	var err error
	for _, ca := range []struct {
		ca   **pki.CA
		name string
	}{{&k.CA, "kcp-ca"}, {&k.ShardCA, "kcp-shard-client-ca"}, {&k.FrontProxyCA, "kcp-front-proxy-ca"}} {
		if *ca.ca, err = pki.NewCA(ca.name); err != nil {
			t.Fatal(err)
		}
	}
	serving, key, err := k.CA.Issue(&x509.Certificate{
		Subject: pkix.Name{CommonName: "kcp"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		t.Fatal(err)
	}
	issueClient := func(ca *pki.CA, cn string) tls.Certificate {
		cert, key, err := ca.Issue(&x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key}
	}
	k.shardCert = issueClient(k.ShardCA, KcpShardClientName)
	k.fpCert = issueClient(k.FrontProxyCA, KcpFrontProxyClientName)
	for _, f := range []struct {
		name string
		data []byte
	}{{"shard-client-ca.crt", k.ShardCA.CertPEM}, {"front-proxy-ca.crt", k.FrontProxyCA.CertPEM}} {
		if err := os.WriteFile(filepath.Join(k.Dir, f.name), f.data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	k.server = httptest.NewUnstartedServer(k)
	k.server.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{serving.Raw}, PrivateKey: key}}}
	k.server.EnableHTTP2 = true
	k.server.StartTLS()
	k.URL = k.server.URL
	t.Cleanup(k.server.Close)
	k.AddUser("provider-token", KcpUser{Name: KcpProviderUser})
	k.workspaces["root"] = &KcpWorkspace{Path: "root", Cluster: "root"}
	return k
}

// AddUser lets token authenticate as u.
func (k *Kcp) AddUser(token string, u KcpUser) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.users[token] = u
}

// AddWorkspace adds a workspace whose content is kube (nil: a workspace whose content no test
// reads; the harness refuses its APIs). The provider may create access
// reviews there (kcp lets a provider review access in workspaces that bind its export only
// through its own RBAC; the test grants it).
func (k *Kcp) AddWorkspace(path, cluster string, kube *KubeAPIServer, bound bool) *KcpWorkspace {
	ws := &KcpWorkspace{Path: path, Cluster: cluster, Kube: kube, Bound: bound}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.workspaces[path], k.workspaces[cluster] = ws, ws
	return ws
}

// AddMountedWorkspace adds a workspace mounted by Mount mountName of mountCluster
// (Workspace.spec.mount).
func (k *Kcp) AddMountedWorkspace(path, cluster, mountCluster, mountName string) *KcpWorkspace {
	ws := &KcpWorkspace{Path: path, Cluster: cluster, MountCluster: mountCluster, MountName: mountName}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.workspaces[path], k.workspaces[cluster] = ws, ws
	return ws
}

// SetBound binds or unbinds the export in the workspaces of clusters, all at once.
func (k *Kcp) SetBound(bound bool, clusters ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range clusters {
		k.workspaces[c].Bound = bound
	}
}

// Forwarded returns the requests sent to mount-apiserver so far (not those of discovery,
// OpenAPI and mounted workspaces' Mount reads).
func (k *Kcp) Forwarded() []KcpForwarded {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.forwarded)
}

// Requests returns the requests served in workspaces so far (their content, their Workspaces
// and their Mounts; not mounted workspaces, the front-proxy mapping or the export's virtual
// workspace).
func (k *Kcp) Requests() []KcpRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.requests)
}

// APIExportURL is the virtual workspace URL of the mounts export.
func (k *Kcp) APIExportURL() string {
	return k.URL + "/services/apiexport/" + KcpExportPath + "/" + KcpExportName
}

// Config returns a client configuration of token in workspace path ("" for the base URL).
func (k *Kcp) Config(token, path string) *rest.Config {
	host := k.URL
	if path != "" {
		host += "/clusters/" + path
	}
	return &rest.Config{Host: host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: k.CA.CertPEM}, QPS: 1000, Burst: 2000}
}

// Kubeconfig writes a kubeconfig of token in workspace path and returns its file.
func (k *Kcp) Kubeconfig(token, path string) (string, error) {
	data, err := KubeconfigBytes(k.Config(token, path))
	if err != nil {
		return "", err
	}
	file := filepath.Join(k.Dir, fmt.Sprintf("%s-%s.kubeconfig", token, strings.NewReplacer(":", "_", "*", "all").Replace(path)))
	return file, os.WriteFile(file, data, 0o600)
}

// Configure sets mount-apiserver's options to meet this kcp: kcp mode, the shard's and the
// front-proxy's CAs and names, the provider's kubeconfig, the APIExport's virtual workspace,
// and the front-proxy mapping's path prefix, under which status.URL is published.
func (k *Kcp) Configure(o *options.Options) error {
	kubeconfig, err := k.Kubeconfig("provider-token", "")
	if err != nil {
		return err
	}
	o.KcpMode = true
	o.Kcp.ShardClientCAFile = filepath.Join(k.Dir, "shard-client-ca.crt")
	o.Kcp.ShardClientNames = []string{KcpShardClientName}
	o.Kcp.FrontProxyClientCAFile = filepath.Join(k.Dir, "front-proxy-ca.crt")
	o.Kcp.FrontProxyClientNames = []string{KcpFrontProxyClientName}
	o.Kcp.Kubeconfig = kubeconfig
	o.Kcp.APIExportURL = k.APIExportURL()
	o.Kcp.PathPrefix = KcpMountsMapping
	o.ExternalBaseURL = k.URL + KcpMountsMapping
	return nil
}

// ServeMounts points the export's virtual storage at mount-apiserver, whose serving
// certificate caPEM verifies (kcp's --shard-virtual-workspace-ca-file).
func (k *Kcp) ServeMounts(mountURL string, caPEM []byte) error {
	u, err := url.Parse(mountURL)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return errors.New("no CA certificate for mount-apiserver")
	}
	client := func(cert tls.Certificate) *http.Client {
		return &http.Client{
			Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}, ForceAttemptHTTP2: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mountURL, k.shard, k.frontProxy = u, client(k.shardCert), client(k.fpCert)
	return nil
}

// ServeHTTP routes as kcp's shard and front-proxy do.
func (k *Kcp) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if rest, ok := strings.CutPrefix(req.URL.Path, "/services/apiexport/"+KcpExportPath+"/"+KcpExportName+"/clusters/"); ok {
		k.serveAPIExport(w, req, rest)
		return
	}
	if strings.HasPrefix(req.URL.Path, KcpMountsMapping+"/") {
		k.serveMapping(w, req)
		return
	}
	rest, ok := strings.CutPrefix(req.URL.Path, "/clusters/")
	if !ok {
		kcpStatus(w, http.StatusNotFound, "NotFound", "the harness serves only /clusters/ and /services/ paths")
		return
	}
	wsName, inner, _ := strings.Cut(rest, "/")
	inner = "/" + inner
	u, ok := k.authenticate(req)
	if !ok {
		kcpStatus(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
		return
	}
	k.mu.Lock()
	ws := k.workspaces[wsName]
	k.mu.Unlock()
	if ws == nil {
		// kcp does not tell strangers which workspaces exist.
		kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("access to workspace %q denied", wsName))
		return
	}
	if ws.MountName != "" {
		k.serveMounted(w, req, ws, inner, u)
		return
	}
	caller := u.Name
	if u, ok = k.impersonate(w, req, ws, u); !ok {
		return
	}
	k.mu.Lock()
	k.requests = append(k.requests, KcpRequest{Method: req.Method, Path: req.URL.Path, User: caller, As: u.Name})
	k.mu.Unlock()
	if ws.Kube == nil && !strings.HasPrefix(inner, "/apis/tenancy.kcp.io/v1alpha1/workspaces/") {
		kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("access to workspace %q denied", ws.Path))
		return
	}
	switch {
	case inner == "/apis":
		k.serveGroups(w, req, ws)
	case inner == "/apis/mounts.kcp.io" || strings.HasPrefix(inner, "/apis/mounts.kcp.io/"):
		k.serveMounts(w, req, ws, inner, u)
	case inner == "/openapi/v3":
		k.serveOpenAPIIndex(w, req, ws, u)
	case strings.HasPrefix(inner, "/openapi/v3/apis/mounts.kcp.io/"):
		if !ws.Bound {
			kcpStatus(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
			return
		}
		k.forwardToMounts(w, req, "/clusters/"+ws.Cluster+inner, u)
	case strings.HasPrefix(inner, "/apis/tenancy.kcp.io/v1alpha1/workspaces/"):
		k.serveWorkspace(w, req, ws, strings.TrimPrefix(inner, "/apis/tenancy.kcp.io/v1alpha1/workspaces/"), u)
	default:
		k.forwardToKube(w, req, ws.Kube, inner, &u)
	}
}

func (k *Kcp) authenticate(req *http.Request) (KcpUser, bool) {
	token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return KcpUser{}, false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	u, ok := k.users[token]
	return u, ok
}

// impersonate applies the request's Impersonate-* headers as kcp does it itself: each of
// user, groups, UID and extras needs RBAC "impersonate" of the caller in the workspace, and
// nothing is impersonated without a user. It answers the refusal itself.
func (k *Kcp) impersonate(w http.ResponseWriter, req *http.Request, ws *KcpWorkspace, u KcpUser) (KcpUser, bool) {
	as := KcpUser{Name: req.Header.Get("Impersonate-User"), Groups: req.Header.Values("Impersonate-Group"), UID: req.Header.Get("Impersonate-Uid")}
	checks := []authorizationv1.ResourceAttributes{{Verb: "impersonate", Resource: "users", Name: as.Name}}
	for _, g := range as.Groups {
		checks = append(checks, authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "groups", Name: g})
	}
	if as.UID != "" {
		checks = append(checks, authorizationv1.ResourceAttributes{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "uids", Name: as.UID})
	}
	for key, values := range req.Header {
		name, ok := strings.CutPrefix(key, "Impersonate-Extra-")
		if !ok {
			continue
		}
		name, err := url.PathUnescape(strings.ToLower(name))
		if err != nil {
			kcpStatus(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("invalid extra key %q", key))
			return u, false
		}
		if as.Extra == nil {
			as.Extra = map[string][]string{}
		}
		as.Extra[name] = values
		for _, v := range values {
			checks = append(checks, authorizationv1.ResourceAttributes{Verb: "impersonate", Group: "authentication.k8s.io", Resource: "userextras", Subresource: name, Name: v})
		}
	}
	if as.Name == "" {
		if len(checks) > 1 {
			kcpStatus(w, http.StatusBadRequest, "BadRequest", "requested impersonation of groups, a UID or extras without impersonating a user")
			return u, false
		}
		return u, true
	}
	for _, attrs := range checks {
		if !k.allowed(req.Context(), ws, u, attrs) {
			kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("user %q cannot impersonate %s %q in workspace %q", u.Name, strings.TrimSuffix(attrs.Resource, "s"), attrs.Name, ws.Path))
			return u, false
		}
	}
	return as, true
}

// allowed asks the workspace's kube-apiserver whether u may do attrs.
func (k *Kcp) allowed(ctx context.Context, ws *KcpWorkspace, u KcpUser, attrs authorizationv1.ResourceAttributes) bool {
	if ws.Kube == nil {
		return false
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for key, v := range u.Extra {
		extra[key] = v
	}
	review, err := ws.Kube.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Name, UID: u.UID, Groups: append([]string{"system:authenticated"}, u.Groups...), Extra: extra, ResourceAttributes: &attrs,
	}}, metav1.CreateOptions{})
	return err == nil && review.Status.Allowed
}

var requestInfos = &genericapirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

// serveMounts is the export's virtual storage in a consumer workspace.
func (k *Kcp) serveMounts(w http.ResponseWriter, req *http.Request, ws *KcpWorkspace, inner string, u KcpUser) {
	if !ws.Bound {
		kcpStatus(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
		return
	}
	if inner == "/apis/mounts.kcp.io/v1alpha1" || inner == "/apis/mounts.kcp.io" {
		k.serveMountsDiscovery(w, req, inner)
		return
	}
	r := req.Clone(req.Context())
	r.URL.Path = inner
	info, err := requestInfos.NewRequestInfo(r)
	if err != nil || !info.IsResourceRequest {
		kcpStatus(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
		return
	}
	attrs := authorizationv1.ResourceAttributes{Verb: info.Verb, Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource, Subresource: info.Subresource, Name: info.Name}
	if !k.allowed(req.Context(), ws, u, attrs) {
		kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("%s %q is forbidden: User %q cannot %s resource %q in API group %q at the cluster scope: access denied", info.Resource, info.Name, u.Name, info.Verb, strings.TrimSuffix(info.Resource+"/"+info.Subresource, "/"), info.APIGroup))
		return
	}
	k.forwardToMounts(w, req, "/clusters/"+ws.Cluster+inner, u)
}

// serveMountsDiscovery answers the group's discovery with mount-apiserver's wildcard
// discovery, fetched live as kcp does on every uncached discovery request.
func (k *Kcp) serveMountsDiscovery(w http.ResponseWriter, req *http.Request, inner string) {
	resources, err := k.wildcardDiscovery(req.Context())
	if err != nil {
		kcpStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "discovery of mounts.kcp.io failed: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if inner == "/apis/mounts.kcp.io" {
		_ = json.NewEncoder(w).Encode(mountsGroup())
		return
	}
	_, _ = w.Write(resources)
}

func mountsGroup() metav1.APIGroup {
	v := metav1.GroupVersionForDiscovery{GroupVersion: "mounts.kcp.io/v1alpha1", Version: "v1alpha1"}
	return metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: "mounts.kcp.io", Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v}
}

func (k *Kcp) wildcardDiscovery(ctx context.Context) ([]byte, error) {
	k.mu.Lock()
	base, client := k.mountURL, k.shard
	k.mu.Unlock()
	if client == nil {
		return nil, errors.New("no endpoint for the export's virtual storage")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base.String()+"/clusters/%2A/apis/mounts.kcp.io/v1alpha1", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(body, &list); err != nil || list.GroupVersion != "mounts.kcp.io/v1alpha1" {
		return nil, fmt.Errorf("not the discovery of mounts.kcp.io/v1alpha1: %v", err)
	}
	return body, nil
}

// serveGroups lists the workspace's groups, plus mounts.kcp.io where it is bound and its
// discovery answers. kcp serves no aggregated discovery.
func (k *Kcp) serveGroups(w http.ResponseWriter, req *http.Request, ws *KcpWorkspace) {
	r, err := http.NewRequestWithContext(req.Context(), http.MethodGet, ws.Kube.URL+"/apis", nil)
	if err != nil {
		kcpStatus(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	r.Header.Set("Accept", "application/json")
	client, err := rest.HTTPClientFor(ws.Kube.AdminConfig)
	if err != nil {
		kcpStatus(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	resp, err := client.Do(r)
	if err != nil {
		kcpStatus(w, http.StatusBadGateway, "InternalError", err.Error())
		return
	}
	defer resp.Body.Close()
	var groups metav1.APIGroupList
	if err := json.NewDecoder(resp.Body).Decode(&groups); err != nil {
		kcpStatus(w, http.StatusBadGateway, "InternalError", err.Error())
		return
	}
	if ws.Bound {
		if _, err := k.wildcardDiscovery(req.Context()); err == nil {
			groups.Groups = append(groups.Groups, mountsGroup())
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(groups)
}

// serveOpenAPIIndex merges the workspace's OpenAPI v3 index with mount-apiserver's.
func (k *Kcp) serveOpenAPIIndex(w http.ResponseWriter, req *http.Request, ws *KcpWorkspace, u KcpUser) {
	fetch := func(client *http.Client, url string, header http.Header) (map[string]map[string]any, error) {
		r, err := http.NewRequestWithContext(req.Context(), http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		for key, v := range header {
			r.Header[key] = v
		}
		resp, err := client.Do(r)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var index struct {
			Paths map[string]map[string]any `json:"paths"`
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s", resp.Status)
		}
		return index.Paths, json.NewDecoder(resp.Body).Decode(&index)
	}
	kubeClient, err := rest.HTTPClientFor(ws.Kube.AdminConfig)
	if err != nil {
		kcpStatus(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	paths, err := fetch(kubeClient, ws.Kube.URL+"/openapi/v3", nil)
	if err != nil {
		kcpStatus(w, http.StatusBadGateway, "InternalError", err.Error())
		return
	}
	k.mu.Lock()
	base, shard := k.mountURL, k.shard
	k.mu.Unlock()
	if ws.Bound && shard != nil {
		mine, err := fetch(shard, base.String()+"/clusters/"+ws.Cluster+"/openapi/v3", k.identityHeaders(u))
		if err == nil {
			for p, v := range mine {
				if strings.HasPrefix(p, "apis/mounts.kcp.io/") {
					paths[p] = v
				}
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"paths": paths})
}

// identityHeaders are what the shard adds about the caller: nothing in v0.32.3.
func (k *Kcp) identityHeaders(u KcpUser) http.Header {
	if k.Version != KcpMain {
		return http.Header{}
	}
	return remoteHeaders(u)
}

// remoteHeaders name u as kcp names callers to backends: X-Remote-User, -Group (with
// system:authenticated) and -Extra-*.
func remoteHeaders(u KcpUser) http.Header {
	h := http.Header{}
	h.Set("X-Remote-User", u.Name)
	for _, g := range u.Groups {
		h.Add("X-Remote-Group", g)
	}
	h.Add("X-Remote-Group", "system:authenticated")
	for key, vs := range u.Extra {
		for _, v := range vs {
			h.Add("X-Remote-Extra-"+url.PathEscape(key), v)
		}
	}
	return h
}

// forwardToMounts sends the request to mount-apiserver at path with the shard's certificate.
func (k *Kcp) forwardToMounts(w http.ResponseWriter, req *http.Request, path string, u KcpUser) {
	k.mu.Lock()
	base, client := k.mountURL, k.shard
	k.mu.Unlock()
	if client == nil {
		kcpStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "no endpoint for the export's virtual storage")
		return
	}
	k.reverseProxy(w, req, base, path, "", client.Transport, func(h http.Header) {
		stripCaller(h)
		maps.Copy(h, k.identityHeaders(u))
	})
}

// stripCaller removes what the caller sent about its identity: kcp never forwards it.
func stripCaller(h http.Header) {
	h.Del("Authorization")
	for key := range h {
		if strings.HasPrefix(key, "Impersonate-") || strings.HasPrefix(key, "X-Remote-") {
			delete(h, key)
		}
	}
}

// reverseProxy sends the request to path at base; rawPath, when not empty, is path as the
// caller encoded it, sent as it came.
func (k *Kcp) reverseProxy(w http.ResponseWriter, req *http.Request, base *url.URL, path, rawPath string, transport http.RoundTripper, header func(http.Header)) {
	// The body is read before it is sent on (the tests' bodies are small): a Go HTTP/2 client
	// (kubectl) stops sending its body once an answer of 300 or more arrives, and Go's reverse
	// proxy waits, when it closes the upstream answer, for a body that then never ends. CI saw
	// a refused create wait 12 minutes so.
	if req.Body != nil && req.Body != http.NoBody {
		body, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
		if err != nil {
			kcpStatus(w, http.StatusBadRequest, "BadRequest", "reading the request body: "+err.Error())
			return
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = base.Scheme, base.Host
			pr.Out.URL.Path, pr.Out.URL.RawPath = path, rawPath
			pr.Out.URL.RawQuery = req.URL.RawQuery
			pr.Out.Host = base.Host
			header(pr.Out.Header)
			k.mu.Lock()
			if k.mountURL != nil && base.Host == k.mountURL.Host {
				k.forwarded = append(k.forwarded, KcpForwarded{Path: path, Header: pr.Out.Header.Clone()})
			}
			k.mu.Unlock()
		},
		Transport:     transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			kcpStatus(w, http.StatusBadGateway, "InternalError", err.Error())
		},
	}
	rp.ServeHTTP(w, req)
}

// forwardToKube serves the workspace's own APIs from its kube-apiserver as u.
func (k *Kcp) forwardToKube(w http.ResponseWriter, req *http.Request, kube *KubeAPIServer, inner string, u *KcpUser) {
	transport, err := rest.TransportFor(kube.AdminConfig)
	if err != nil {
		kcpStatus(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	base, _ := url.Parse(kube.URL)
	k.reverseProxy(w, req, base, inner, "", transport, func(h http.Header) {
		stripCaller(h)
		if u != nil {
			h.Set("Impersonate-User", u.Name)
			for _, g := range u.Groups {
				h.Add("Impersonate-Group", g)
			}
			if u.UID != "" {
				h.Set("Impersonate-Uid", u.UID)
			}
			for key, values := range u.Extra {
				h["Impersonate-Extra-"+url.PathEscape(key)] = values
			}
		}
	})
}

// serveWorkspace answers GET of a child workspace of ws, as tenancy.kcp.io serves it.
func (k *Kcp) serveWorkspace(w http.ResponseWriter, req *http.Request, parent *KcpWorkspace, name string, u KcpUser) {
	if req.Method != http.MethodGet || strings.Contains(name, "/") {
		kcpStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "the harness serves GET of one workspace")
		return
	}
	// The root workspace has no content here; its Workspaces are the provider's to read, as
	// a deployment grants it.
	if parent.Kube == nil && u.Name != KcpProviderUser || parent.Kube != nil && !k.allowed(req.Context(), parent, u, authorizationv1.ResourceAttributes{Verb: "get", Group: "tenancy.kcp.io", Resource: "workspaces", Name: name}) {
		kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("workspaces.tenancy.kcp.io %q is forbidden: User %q cannot get resource \"workspaces\" in API group \"tenancy.kcp.io\" in workspace %q", name, u.Name, parent.Path))
		return
	}
	k.mu.Lock()
	ws := k.workspaces[parent.Path+":"+name]
	k.mu.Unlock()
	if ws == nil {
		kcpStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("workspaces.tenancy.kcp.io %q not found", name))
		return
	}
	obj := tenancyv1alpha1.Workspace{
		TypeMeta:   metav1.TypeMeta{Kind: "Workspace", APIVersion: "tenancy.kcp.io/v1alpha1"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"kcp.io/cluster": parent.Cluster}},
		Spec:       tenancyv1alpha1.WorkspaceSpec{Cluster: ws.Cluster, URL: k.URL + "/clusters/" + ws.Path},
		Status:     tenancyv1alpha1.WorkspaceStatus{Phase: corev1alpha1.LogicalClusterPhaseReady},
	}
	if ws.MountName != "" {
		obj.Spec.Mount = &tenancyv1alpha1.Mount{Reference: tenancyv1alpha1.ObjectReference{APIVersion: "mounts.kcp.io/v1alpha1", Kind: "Mount", Name: ws.MountName}}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(obj)
}

// serveMounted serves a mounted workspace as kcp does: from the Mount's status.URL, once the
// Mount is Ready.
func (k *Kcp) serveMounted(w http.ResponseWriter, req *http.Request, ws *KcpWorkspace, inner string, u KcpUser) {
	k.mu.Lock()
	base, shard, fp := k.mountURL, k.shard, k.frontProxy
	k.mu.Unlock()
	if shard == nil {
		kcpStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "mount not ready")
		return
	}
	r, err := http.NewRequestWithContext(req.Context(), http.MethodGet, base.String()+"/clusters/"+ws.MountCluster+"/apis/mounts.kcp.io/v1alpha1/mounts/"+ws.MountName, nil)
	if err != nil {
		kcpStatus(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	resp, err := shard.Do(r)
	if err != nil {
		kcpStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", err.Error())
		return
	}
	var mount struct {
		Status struct {
			Phase string `json:"phase"`
			URL   string `json:"URL"`
		} `json:"status"`
	}
	err = json.NewDecoder(resp.Body).Decode(&mount)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || mount.Status.Phase != "Ready" || mount.Status.URL == "" {
		kcpStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf("workspace %q is mounted and its mount is not ready", ws.Path))
		return
	}
	target, err := url.Parse(strings.TrimSuffix(mount.Status.URL, "/") + inner)
	if err != nil {
		kcpStatus(w, http.StatusBadGateway, "InternalError", err.Error())
		return
	}
	own, _ := url.Parse(k.URL)
	switch {
	case target.Host == own.Host && strings.HasPrefix(target.Path, KcpMountsMapping+"/"):
		// The front-proxy's mapping to mount-apiserver: requestheader certificate and
		// X-Remote-*, the caller's credentials stripped.
		k.reverseProxy(w, req, base, target.Path, "", fp.Transport, func(h http.Header) {
			stripCaller(h)
			maps.Copy(h, remoteHeaders(u))
		})
	case target.Host == own.Host:
		// Standalone kcp sends the request on unchanged; its own path authenticates it.
		r := req.Clone(req.Context())
		r.URL.Path, r.URL.RawPath = target.Path, ""
		k.ServeHTTP(w, r)
	default:
		kcpStatus(w, http.StatusNotFound, "NotFound", "the front-proxy maps no path to "+target.Host+" (kcp issue #3845)")
	}
}

// serveMapping is the front-proxy's /services/mounts mapping called directly. A mapping
// outside /clusters/ forwards the original path, as the caller encoded it.
func (k *Kcp) serveMapping(w http.ResponseWriter, req *http.Request) {
	u, ok := k.authenticate(req)
	if !ok {
		kcpStatus(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
		return
	}
	k.mu.Lock()
	base, fp := k.mountURL, k.frontProxy
	k.mu.Unlock()
	if fp == nil {
		kcpStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "mapping has no backend")
		return
	}
	k.reverseProxy(w, req, base, req.URL.Path, req.URL.RawPath, fp.Transport, func(h http.Header) {
		stripCaller(h)
		maps.Copy(h, remoteHeaders(u))
	})
}

// serveAPIExport is the export's virtual workspace, for the provider only.
func (k *Kcp) serveAPIExport(w http.ResponseWriter, req *http.Request, rest string) {
	u, ok := k.authenticate(req)
	if !ok {
		kcpStatus(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
		return
	}
	if u.Name != KcpProviderUser {
		kcpStatus(w, http.StatusForbidden, "Forbidden", "only the export's owner may use its virtual workspace")
		return
	}
	cluster, inner, _ := strings.Cut(rest, "/")
	inner = "/" + inner
	if cluster == "*" {
		switch {
		case inner == "/apis/apis.kcp.io/v1alpha2/apibindings" && req.Method == http.MethodGet:
			k.serveBindings(w, req)
		case strings.HasPrefix(inner, "/apis/mounts.kcp.io/"):
			k.forwardToMounts(w, req, "/clusters/*"+inner, u)
		default:
			kcpStatus(w, http.StatusForbidden, "Forbidden", "not served across workspaces")
		}
		return
	}
	k.mu.Lock()
	ws := k.workspaces[cluster]
	k.mu.Unlock()
	if ws == nil || !ws.Bound || ws.Kube == nil {
		kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("workspace %q does not bind the export", cluster))
		return
	}
	switch {
	case strings.HasPrefix(inner, "/api/v1/namespaces/") && strings.Contains(inner, "/secrets"):
		// The accepted permission claim on secrets: read access as the virtual workspace grants.
		if req.Method != http.MethodGet {
			kcpStatus(w, http.StatusForbidden, "Forbidden", "the claim grants get, list and watch")
			return
		}
		k.forwardToKube(w, req, ws.Kube, inner, nil)
	case strings.HasPrefix(inner, "/apis/mounts.kcp.io/"):
		k.forwardToMounts(w, req, "/clusters/"+ws.Cluster+inner, u)
	default:
		kcpStatus(w, http.StatusForbidden, "Forbidden", "not claimed by the export")
	}
}

// SetBindingListing changes how the export's APIBindings are listed from now on.
func (k *Kcp) SetBindingListing(l KcpBindingListing) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.bindingListing = l
}

// BindingListings returns how many listings of the export's APIBindings were begun (a first
// page requested) and how many failed so far.
func (k *Kcp) BindingListings() (begun, failed int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.listingsBegun, k.listingsFailed
}

// serveBindings lists the export's APIBindings across workspaces, in the order of their
// logical clusters, one page per request as kcp pages lists: at most limit items and a
// continue token naming where the next page starts.
func (k *Kcp) serveBindings(w http.ResponseWriter, req *http.Request) {
	query := req.URL.Query()
	if query.Get("watch") != "" {
		kcpStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "the harness lists APIBindings and does not watch them")
		return
	}
	limit := 0
	if l := query.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			kcpStatus(w, http.StatusBadRequest, "BadRequest", fmt.Sprintf("invalid limit %q", l))
			return
		}
		limit = n
	}
	after := ""
	if c := query.Get("continue"); c != "" {
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil || len(raw) == 0 {
			kcpStatus(w, http.StatusBadRequest, "BadRequest", "continue key is not valid")
			return
		}
		after = string(raw)
	}

	k.mu.Lock()
	defer k.mu.Unlock()
	if after == "" {
		k.listingsBegun++
	}
	var bound []string
	for key, ws := range k.workspaces {
		if key == ws.Cluster && ws.Bound && ws.Cluster > after {
			bound = append(bound, ws.Cluster)
		}
	}
	slices.Sort(bound)
	if page := k.bindingListing.PageSize; page > 0 && (limit == 0 || page < limit) {
		limit = page
	}
	list := apisv1alpha2.APIBindingList{TypeMeta: metav1.TypeMeta{Kind: "APIBindingList", APIVersion: "apis.kcp.io/v1alpha2"}, ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
	if limit > 0 && len(bound) > limit {
		bound = bound[:limit]
		list.Continue = base64.RawURLEncoding.EncodeToString([]byte(bound[limit-1]))
	}
	if list.Continue == "" && k.bindingListing.FailEvery > 0 && k.listingsBegun%k.bindingListing.FailEvery == 0 {
		k.listingsFailed++
		kcpStatus(w, http.StatusInternalServerError, "InternalError", "etcdserver: request timed out")
		return
	}
	for _, cluster := range bound {
		list.Items = append(list.Items, apisv1alpha2.APIBinding{
			TypeMeta: metav1.TypeMeta{Kind: "APIBinding", APIVersion: "apis.kcp.io/v1alpha2"},
			ObjectMeta: metav1.ObjectMeta{
				Name: "mounts", UID: types.UID("binding-of-" + cluster), ResourceVersion: "1",
				Annotations: map[string]string{"kcp.io/cluster": cluster},
				// kcp filters the export's view of APIBindings by this label.
				Labels: map[string]string{apisv1alpha1.InternalAPIBindingExportLabelKey: "export-label-hash"},
			},
			Spec:   apisv1alpha2.APIBindingSpec{Reference: apisv1alpha2.BindingReference{Export: &apisv1alpha2.ExportBindingReference{Path: KcpExportPath, Name: KcpExportName}}},
			Status: apisv1alpha2.APIBindingStatus{Phase: apisv1alpha2.APIBindingPhaseBound},
		})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}

func kcpStatus(w http.ResponseWriter, code int, reason, message string) {
	var body bytes.Buffer
	_ = json.NewEncoder(&body).Encode(metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Code: int32(code), Reason: metav1.StatusReason(reason), Message: message,
	})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body.Bytes())
}
