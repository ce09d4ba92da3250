package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
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
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
)

// KcpVersion is the kcp whose behaviour the harness reproduces (DESIGN.md section 1).
type KcpVersion string

const (
	// KcpV0323 forwards to the APIExport's virtual storage with the shard's client certificate
	// and no caller identity at all; behind its front-proxy a mounted workspace's request goes
	// to status.URL with the front-proxy's requestheader certificate and X-Remote-* (observed).
	KcpV0323 KcpVersion = "v0.32.3"
	// KcpMain202608 is kcp main of 2026-08 (commit dac74f5, run on loopback): X-Remote-User,
	// -Group and -Extra-* and X-Kcp-Virtual-Resource-Hops over the shard's certificate to
	// virtual storage; its WithLocalProxy forwards a mounted workspace's request BEFORE
	// authenticating it, with InsecureSkipVerify, the --mount-proxy-client-cert-file
	// certificate, and the caller's Authorization, Impersonate-* and X-Remote-* unchanged.
	KcpMain202608 KcpVersion = "main-2026-08"
	// KcpMain is newer kcp main (kcp-dev/kcp pkg/server/mountproxy.go, read from source): as
	// KcpMain202608 to virtual storage; a mounted workspace's request is authenticated first,
	// authorized as "get" on the Workspace in its parent, impersonation refused,
	// Authorization and Impersonate-* dropped, X-Remote-User/-Group/-Extra-* (no UID) sent
	// with the mount-proxy certificate, hops bounded by X-Kcp-Mount-Hops (508 after 3), https
	// only with verification.
	KcpMain KcpVersion = "main"
)

// Names the harness gives its parts.
const (
	// KcpExportName is the name of the mounts APIExport.
	KcpExportName = "mounts.kcp.io"
	// KcpExportPath is where the export lives unless the harness learnt otherwise (an
	// APIBinding created by kubectl, in KcpOptions.Kinds mode).
	KcpExportPath = "root"
	// KcpShardClientName is the common name of the shard's client certificate.
	KcpShardClientName = "kcp-shard"
	// KcpFrontProxyClientName is the common name of the front-proxy's requestheader
	// certificate.
	KcpFrontProxyClientName = "kcp-front-proxy"
	// KcpMountProxyClientName is the common name of kcp's --mount-proxy-client-cert-file,
	// signed, by convention, by the front-proxy's requestheader CA (FrontProxyCA).
	KcpMountProxyClientName = "kcp-mount-proxy"
	// KcpMountsMapping is the front-proxy path mapped to mount-apiserver.
	KcpMountsMapping = "/services/mounts"
	// KcpProviderUser is the identity of mount-apiserver in kcp (--kcp-kubeconfig), token
	// KcpProviderToken.
	KcpProviderUser  = "mount-apiserver"
	KcpProviderToken = "provider-token"
	// KcpAdminUser is kcp's own admin (kcp's admin.kubeconfig), token KcpAdminToken, in
	// KcpAdminGroup, which kcp binds to cluster-admin in every workspace.
	KcpAdminUser  = "kcp-admin"
	KcpAdminToken = "admin-token"
	KcpAdminGroup = "system:kcp:admin"
)

// Headers kcp uses between its own parts.
const (
	kcpVirtualResourceHops = "X-Kcp-Virtual-Resource-Hops"
	kcpMountHops           = "X-Kcp-Mount-Hops"
	kcpMaxMountHops        = 3
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

	// boundAt is when the binding was made while the harness ran: for KcpOptions.BindingDelay
	// after it, the bound resource answers 404.
	boundAt time.Time
	// phase of the Workspace (kcp's LogicalClusterPhase); mountURL is status.URL of the
	// Mount as kcp copied it when it reconciled the Workspace, once.
	phase    string
	mountURL string
	// generation counts the Workspace's events; a reconcile of an older one is dropped.
	generation int
}

// KcpUser is a user of the harness, authenticated by bearer token as kcp authenticates
// tokens (e.g. kcp's --token-auth-file).
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
	// Cert is the common name of the client certificate it was sent with.
	Cert string
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

// KcpOptions shape the harness.
type KcpOptions struct {
	Version KcpVersion
	// WorkspaceMounts is kcp's feature gate WorkspaceMounts, off by default in v0.32.3:
	// without it a mounted Workspace stays Scheduling and its requests answer 404.
	WorkspaceMounts bool
	// BindingDelay is how long a binding made while the harness runs (SetBound, or an
	// APIBinding created with kubectl) answers 404 for the bound resource, as kcp does for a
	// few seconds after an APIBinding. Workspaces added bound (AddWorkspace) are settled.
	BindingDelay time.Duration
	// Kinds installs kcp's kinds (tenancy.kcp.io Workspace, apis.kcp.io APIResourceSchema,
	// APIExport and APIBinding, and the cache.kcp.io kinds of Version) as CRDs in the
	// kube-apiserver of every workspace with content, so kubectl apply stores them, and runs
	// kcp's part in them: Workspaces become workspaces (a new kube-apiserver each, or a
	// mounted one), APIBindings bind, the endpoint slice's URL becomes the virtual storage's
	// endpoint. See kcp_kinds.go.
	Kinds bool
	// VirtualWorkspaceCA verifies the endpoint slice's URL (kcp's
	// --shard-virtual-workspace-ca-file), with Kinds.
	VirtualWorkspaceCA []byte
	// Listener, if set, is where the harness listens (a test that needs a given port).
	Listener net.Listener
}

// Kcp stands in for a kcp shard and its front-proxy on one loopback listener, reproducing
// exactly what DESIGN.md section 1 lists of kcp v0.32.3 and of the two states of kcp main
// (Options.Version); a real kcp cannot be built here. It refuses whatever real kcp was seen to
// refuse:
//
//   - Authentication by bearer token (AddUser), as kcp's --token-auth-file. kcp's
//     authenticator adds system:authenticated, so the harness's own checks of a caller include
//     it. kcp's admin (KcpAdminToken) is in system:kcp:admin, which the harness binds to
//     cluster-admin in every workspace, as kcp does; it has no other privilege here.
//   - In every workspace, before any RBAC on resources, verb "access" on the non-resource URL
//     "/" for the caller (and, when it impersonates, for the impersonator too): every request
//     in a workspace (its content, its Workspaces, the export's virtual storage, discovery).
//   - SubjectAccessReviews created in a workspace are evaluated through the same chain: the
//     review of the workspace's RBAC AND an "access" review of the same subject, with exactly
//     the groups sent (no implicit system:authenticated).
//   - The export's virtual workspace (/services/apiexport/<cluster>/<export>/clusters/...) is
//     authorized in the export's workspace: "access", "get" on the APIExport, its content
//     subresource with the request's verb, and "list apibindings" for listing the bindings;
//     Secrets only of workspaces that bind the export and accepted its claim.
//   - Workspaces (tenancy.kcp.io) are read with "get workspaces" in their parent: the
//     provider resolves Workspace and Redirect targets so.
//   - Mounted workspaces need Options.WorkspaceMounts; kcp reads a Mount's status.URL once,
//     when it reconciles the Workspace (TouchWorkspace is a new event); forwarding to it
//     differs by Version (kcp_mounted.go).
//   - Right after a binding the resource answers 404 for Options.BindingDelay.
//   - Discovery of mounts.kcp.io names the resource as the APIResourceSchema does (kind,
//     singular, short names, categories), not as mount-apiserver's discovery does; the group
//     exists only while mount-apiserver's wildcard discovery answers, fetched live.
//
// Paths:
//
//   - /clusters/<workspace path or logical cluster>/apis/mounts.kcp.io/...: the APIExport's
//     virtual storage: RBAC in the workspace (mounts/proxy with the request's verb), then
//     forwarded to mount-apiserver at /clusters/<logical cluster>/... with the shard's client
//     certificate, verifying mount-apiserver's serving certificate against its CA, the
//     caller's Authorization, Impersonate-* and X-Remote-* stripped; kcp main adds
//     X-Remote-* and X-Kcp-Virtual-Resource-Hops.
//   - /clusters/<mounted workspace>/...: see kcp_mounted.go.
//   - /services/mounts/...: the front-proxy's mapping to mount-apiserver, with its
//     requestheader certificate and X-Remote-* of the authenticated caller.
//   - /services/apiexport/<cluster>/mounts.kcp.io/clusters/<lc|*>/...: the export's virtual
//     workspace (claimed Secrets, the export's APIBindings paged, Mounts).
//   - other /clusters/<workspace>/... paths: the workspace's own APIs (its kube-apiserver,
//     with impersonation of the authenticated caller).
//
// Requests and Forwarded tell a test what kcp served and what it sent to mount-apiserver.
type Kcp struct {
	Version KcpVersion
	Options KcpOptions
	URL     string
	// CA signs the harness's serving certificate.
	CA           *pki.CA
	ShardCA      *pki.CA
	FrontProxyCA *pki.CA
	Dir          string

	t              testing.TB
	server         *httptest.Server
	shardCert      tls.Certificate
	fpCert         tls.Certificate
	mountProxyCert tls.Certificate
	stop           chan struct{}
	stopOnce       sync.Once
	background     sync.WaitGroup

	mu            sync.Mutex
	workspaces    map[string]*KcpWorkspace // by path and by cluster
	users         map[string]KcpUser       // by token
	mountURL      *url.URL
	mountRoots    *x509.CertPool
	shard         *http.Client
	frontProxy    *http.Client
	forwarded     []KcpForwarded
	requests      []KcpRequest
	exportCluster string
	schemaNames   *schemaNames
	kinds         *kinds

	bindingListing                KcpBindingListing
	listingsBegun, listingsFailed int
}

// StartKcp starts the harness of version on 127.0.0.1, without WorkspaceMounts, with a
// binding delay of 2 s, and stops it with t.Cleanup.
func StartKcp(t testing.TB, version KcpVersion) *Kcp {
	t.Helper()
	return StartKcpWith(t, KcpOptions{Version: version, BindingDelay: 2 * time.Second})
}

// StartKcpWith starts the harness with opts.
func StartKcpWith(t testing.TB, opts KcpOptions) *Kcp {
	t.Helper()
	if opts.Version == "" {
		opts.Version = KcpV0323
	}
	k := &Kcp{
		Version: opts.Version, Options: opts, Dir: t.TempDir(), t: t, stop: make(chan struct{}),
		workspaces: map[string]*KcpWorkspace{}, users: map[string]KcpUser{}, exportCluster: KcpExportPath,
	}
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
	k.shardCert = k.IssueClientCert(k.ShardCA, KcpShardClientName)
	k.fpCert = k.IssueClientCert(k.FrontProxyCA, KcpFrontProxyClientName)
	k.mountProxyCert = k.IssueClientCert(k.FrontProxyCA, KcpMountProxyClientName)
	for _, f := range []struct {
		name string
		data []byte
	}{{"shard-client-ca.crt", k.ShardCA.CertPEM}, {"front-proxy-ca.crt", k.FrontProxyCA.CertPEM}, {"kcp-ca.crt", k.CA.CertPEM}} {
		if err := os.WriteFile(filepath.Join(k.Dir, f.name), f.data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	k.server = httptest.NewUnstartedServer(k)
	if opts.Listener != nil {
		_ = k.server.Listener.Close()
		k.server.Listener = opts.Listener
	}
	k.server.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{serving.Raw}, PrivateKey: key}}}
	k.server.EnableHTTP2 = true
	k.server.StartTLS()
	k.URL = k.server.URL
	t.Cleanup(k.close)
	k.AddUser(KcpProviderToken, KcpUser{Name: KcpProviderUser})
	k.AddUser(KcpAdminToken, KcpUser{Name: KcpAdminUser, Groups: []string{KcpAdminGroup}})
	k.workspaces["root"] = &KcpWorkspace{Path: "root", Cluster: "root", phase: "Ready"}
	if opts.Kinds {
		k.kinds = &kinds{}
		k.background.Add(1)
		go k.runKinds()
	}
	return k
}

// close stops the harness's controllers, then its listener.
func (k *Kcp) close() {
	k.stopOnce.Do(func() { close(k.stop) })
	k.background.Wait()
	k.server.Close()
	if k.kinds != nil {
		k.kinds.stopAll()
	}
}

// IssueClientCert issues a client certificate of ca for cn.
func (k *Kcp) IssueClientCert(ca *pki.CA, cn string) tls.Certificate {
	cert, key, err := ca.Issue(&x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		k.t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key}
}

// AddUser lets token authenticate as u.
func (k *Kcp) AddUser(token string, u KcpUser) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.users[token] = u
}

// AddWorkspace adds a workspace whose content is kube (nil: a workspace whose content no test
// reads; the harness refuses its APIs, and every right there). In kube, the harness binds
// system:kcp:admin to cluster-admin, as kcp does in every workspace, and, with
// Options.Kinds, installs kcp's kinds. Path "root" gives root its content.
func (k *Kcp) AddWorkspace(path, cluster string, kube *KubeAPIServer, bound bool) *KcpWorkspace {
	k.t.Helper()
	if kube != nil {
		if err := k.bootstrap(context.Background(), kube); err != nil {
			k.t.Fatal(err)
		}
	}
	ws := &KcpWorkspace{Path: path, Cluster: cluster, Kube: kube, Bound: bound, phase: "Ready"}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.workspaces[path], k.workspaces[cluster] = ws, ws
	return ws
}

// bootstrap gives kube what kcp gives every new workspace.
func (k *Kcp) bootstrap(ctx context.Context, kube *KubeAPIServer) error {
	if _, err := kube.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "system:kcp:admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: KcpAdminGroup}},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("binding %s in a workspace: %w", KcpAdminGroup, err)
	}
	if k.kinds != nil {
		return k.kinds.install(ctx, k.Version, kube)
	}
	return nil
}

// AddMountedWorkspace adds a workspace mounted by Mount mountName of mountCluster
// (Workspace.spec.mount) and reconciles it as kcp does: without WorkspaceMounts it stays
// Scheduling; otherwise the Mount is read through the virtual storage until it has a
// status.URL, which is then copied once, and the workspace is Ready if the Mount was.
func (k *Kcp) AddMountedWorkspace(path, cluster, mountCluster, mountName string) *KcpWorkspace {
	ws := &KcpWorkspace{Path: path, Cluster: cluster, MountCluster: mountCluster, MountName: mountName, phase: "Scheduling"}
	k.mu.Lock()
	k.workspaces[path], k.workspaces[cluster] = ws, ws
	k.mu.Unlock()
	k.reconcileMounted(ws)
	return ws
}

// TouchWorkspace is an event of the Workspace of path (an update of it, as a label
// change makes): kcp reconciles it again, and reads its Mount's status.URL anew.
func (k *Kcp) TouchWorkspace(path string) {
	k.mu.Lock()
	ws := k.workspaces[path]
	k.mu.Unlock()
	if ws != nil && ws.MountName != "" {
		k.reconcileMounted(ws)
	}
}

// WorkspacePhase returns the phase of the Workspace of path.
func (k *Kcp) WorkspacePhase(path string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ws := k.workspaces[path]; ws != nil {
		return ws.phase
	}
	return ""
}

// SetBound binds or unbinds the export in the workspaces of clusters, all at once. A new
// binding answers 404 for Options.BindingDelay.
func (k *Kcp) SetBound(bound bool, clusters ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, c := range clusters {
		ws := k.workspaces[c]
		if bound && !ws.Bound {
			ws.boundAt = time.Now()
		}
		ws.Bound = bound
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
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.URL + "/services/apiexport/" + k.exportCluster + "/" + KcpExportName
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
	file := filepath.Join(k.Dir, fmt.Sprintf("%s-%s.kubeconfig", token, strings.NewReplacer(":", "_", "*", "all", "/", "_").Replace(path)))
	return file, os.WriteFile(file, data, 0o600)
}

// FrontProxyClientNames are the names of --kcp-front-proxy-client-names that README
// recommends for the harness's Version: the front-proxy's requestheader certificate, and,
// only for newer kcp main, whose mount proxy authenticates callers before it names them, the
// --mount-proxy-client-cert-file certificate. kcp main of 2026-08 presents that certificate
// for requests it did not authenticate: never trust it there.
func (k *Kcp) FrontProxyClientNames() []string {
	if k.Version == KcpMain {
		return []string{KcpFrontProxyClientName, KcpMountProxyClientName}
	}
	return []string{KcpFrontProxyClientName}
}

// Configure sets mount-apiserver's options to meet this kcp: kcp mode, the shard's and the
// front-proxy's CAs and names, the provider's kubeconfig, the APIExport's virtual workspace,
// and the front-proxy mapping's path prefix, under which status.URL is published.
func (k *Kcp) Configure(o *options.Options) error {
	kubeconfig, err := k.Kubeconfig(KcpProviderToken, "")
	if err != nil {
		return err
	}
	o.KcpMode = true
	o.Kcp.ShardClientCAFile = filepath.Join(k.Dir, "shard-client-ca.crt")
	o.Kcp.ShardClientNames = []string{KcpShardClientName}
	o.Kcp.FrontProxyClientCAFile = filepath.Join(k.Dir, "front-proxy-ca.crt")
	o.Kcp.FrontProxyClientNames = k.FrontProxyClientNames()
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
	k.mountURL, k.mountRoots, k.shard, k.frontProxy = u, roots, client(k.shardCert), client(k.fpCert)
	return nil
}

// ServeHTTP routes as kcp's shard and front-proxy do.
func (k *Kcp) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if rest, ok := strings.CutPrefix(req.URL.Path, "/services/apiexport/"); ok {
		k.serveAPIExport(w, req, rest)
		return
	}
	if strings.HasPrefix(req.URL.Path, KcpMountsMapping+"/") {
		u, ok := k.authenticate(req)
		if !ok {
			kcpStatus(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
			return
		}
		k.serveMapping(w, req, u)
		return
	}
	rest, ok := strings.CutPrefix(req.URL.Path, "/clusters/")
	if !ok {
		kcpStatus(w, http.StatusNotFound, "NotFound", "the harness serves only /clusters/ and /services/ paths")
		return
	}
	wsName, inner, _ := strings.Cut(rest, "/")
	inner = "/" + inner
	k.mu.Lock()
	ws := k.workspaces[wsName]
	k.mu.Unlock()
	if ws != nil && ws.MountName != "" && k.Version == KcpMain202608 {
		// WithLocalProxy runs before authentication.
		k.serveMountedUnauthenticated(w, req, ws, inner)
		return
	}
	u, ok := k.authenticate(req)
	if !ok {
		kcpStatus(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
		return
	}
	k.serveWorkspaceAs(w, req, ws, wsName, inner, u)
}

// serveWorkspaceAs serves a request in workspace ws (named wsName by the caller) as the
// authenticated u.
func (k *Kcp) serveWorkspaceAs(w http.ResponseWriter, req *http.Request, ws *KcpWorkspace, wsName, inner string, u KcpUser) {
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
	as, ok := k.impersonate(w, req, ws, u)
	if !ok {
		return
	}
	k.mu.Lock()
	k.requests = append(k.requests, KcpRequest{Method: req.Method, Path: req.URL.Path, User: caller, As: as.Name})
	k.mu.Unlock()
	if !k.access(req.Context(), ws, callerSubject(as)) {
		kcpStatus(w, http.StatusForbidden, "Forbidden", forbiddenMessage(req, inner, as.Name))
		return
	}
	switch {
	case inner == "/apis":
		k.serveGroups(w, req, ws)
	case inner == "/apis/mounts.kcp.io" || strings.HasPrefix(inner, "/apis/mounts.kcp.io/"):
		k.serveMounts(w, req, ws, inner, as)
	case inner == "/openapi/v3":
		k.serveOpenAPIIndex(w, req, ws, as)
	case strings.HasPrefix(inner, "/openapi/v3/apis/mounts.kcp.io/"):
		if !k.bound(ws) {
			kcpStatus(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
			return
		}
		k.forwardToMounts(w, req, "/clusters/"+ws.Cluster+inner, as)
	case inner == "/apis/authorization.k8s.io/v1/subjectaccessreviews" && req.Method == http.MethodPost:
		k.serveSubjectAccessReview(w, req, ws, as)
	case strings.HasPrefix(inner, "/apis/authorization.k8s.io/v1/namespaces/") && strings.HasSuffix(inner, "/localsubjectaccessreviews"):
		// Not evaluated through kcp's chain here: refused rather than answered by RBAC alone.
		kcpStatus(w, http.StatusNotImplemented, "NotImplemented", "the harness does not evaluate LocalSubjectAccessReviews")
	case k.kinds == nil && strings.HasPrefix(inner, "/apis/tenancy.kcp.io/v1alpha1/workspaces/"):
		k.serveWorkspace(w, req, ws, strings.TrimPrefix(inner, "/apis/tenancy.kcp.io/v1alpha1/workspaces/"), as)
	case ws.Kube == nil:
		kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("access to workspace %q denied", ws.Path))
	default:
		if k.kinds != nil && !k.kinds.admit(w, req, k, ws, inner, as) {
			return
		}
		k.forwardToKube(w, req, ws.Kube, inner, &as)
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

// impersonate applies the request's Impersonate-* headers as kcp does it itself: the caller
// needs "access" in the workspace and RBAC "impersonate" of each of user, groups, UID and
// extras there, and nothing is impersonated without a user. It answers the refusal itself.
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
	if !k.access(req.Context(), ws, callerSubject(u)) {
		kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("user %q cannot impersonate in workspace %q: access denied", u.Name, ws.Path))
		return u, false
	}
	for _, attrs := range checks {
		if !k.rbac(req.Context(), ws, callerSubject(u), attrs) {
			kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("user %q cannot impersonate %s %q in workspace %q", u.Name, strings.TrimSuffix(attrs.Resource, "s"), attrs.Name, ws.Path))
			return u, false
		}
	}
	return as, true
}

// subject is whom a review asks about.
type subject struct {
	User   string
	UID    string
	Groups []string
	Extra  map[string][]string
}

// callerSubject is an authenticated caller as kcp's authorizers see it: kcp's authenticator
// adds system:authenticated.
func callerSubject(u KcpUser) subject {
	groups := slices.Clone(u.Groups)
	if !slices.Contains(groups, "system:authenticated") {
		groups = append(groups, "system:authenticated")
	}
	return subject{User: u.Name, UID: u.UID, Groups: groups, Extra: u.Extra}
}

// review asks the workspace's kube-apiserver (its RBAC) about s, with exactly s's groups.
func (k *Kcp) review(ctx context.Context, ws *KcpWorkspace, s subject, resource *authorizationv1.ResourceAttributes, nonResource *authorizationv1.NonResourceAttributes) (bool, string) {
	if ws == nil || ws.Kube == nil {
		return false, "the workspace has no content"
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for key, v := range s.Extra {
		extra[key] = v
	}
	review, err := ws.Kube.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: s.User, UID: s.UID, Groups: s.Groups, Extra: extra, ResourceAttributes: resource, NonResourceAttributes: nonResource,
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, err.Error()
	}
	return review.Status.Allowed, review.Status.Reason
}

// access is kcp's workspace content check: verb "access" on "/" in ws.
func (k *Kcp) access(ctx context.Context, ws *KcpWorkspace, s subject) bool {
	ok, _ := k.review(ctx, ws, s, nil, &authorizationv1.NonResourceAttributes{Path: "/", Verb: "access"})
	return ok
}

// rbac asks the workspace's RBAC alone about attrs.
func (k *Kcp) rbac(ctx context.Context, ws *KcpWorkspace, s subject, attrs authorizationv1.ResourceAttributes) bool {
	ok, _ := k.review(ctx, ws, s, &attrs, nil)
	return ok
}

// allowed is kcp's chain for the authenticated u in ws: "access", then attrs.
func (k *Kcp) allowed(ctx context.Context, ws *KcpWorkspace, u KcpUser, attrs authorizationv1.ResourceAttributes) bool {
	s := callerSubject(u)
	return k.access(ctx, ws, s) && k.rbac(ctx, ws, s, attrs)
}

// serveSubjectAccessReview evaluates a SubjectAccessReview created in ws as kcp does: through
// the same chain as requests, so the reviewed subject needs "access" in ws besides the RBAC
// asked about, with exactly the groups sent. The creator needs "create" on
// subjectaccessreviews (its "access" was checked already).
func (k *Kcp) serveSubjectAccessReview(w http.ResponseWriter, req *http.Request, ws *KcpWorkspace, as KcpUser) {
	ctx := req.Context()
	if !k.rbac(ctx, ws, callerSubject(as), authorizationv1.ResourceAttributes{Verb: "create", Group: "authorization.k8s.io", Resource: "subjectaccessreviews"}) {
		kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("subjectaccessreviews.authorization.k8s.io is forbidden: User %q cannot create resource \"subjectaccessreviews\" in API group \"authorization.k8s.io\" in workspace %q", as.Name, ws.Path))
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		kcpStatus(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	var sar authorizationv1.SubjectAccessReview
	if err := decodeKube(body, req.Header.Get("Content-Type"), &sar); err != nil {
		kcpStatus(w, http.StatusBadRequest, "BadRequest", "decoding the SubjectAccessReview: "+err.Error())
		return
	}
	spec := sar.Spec
	s := subject{User: spec.User, UID: spec.UID, Groups: spec.Groups}
	if len(spec.Extra) > 0 {
		s.Extra = map[string][]string{}
		for key, v := range spec.Extra {
			s.Extra[key] = v
		}
	}
	allowed, reason := k.review(ctx, ws, s, spec.ResourceAttributes, spec.NonResourceAttributes)
	if allowed && !k.access(ctx, ws, s) {
		allowed, reason = false, "access denied: verb \"access\" on \"/\" is not granted in this workspace"
	}
	sar.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: allowed, Reason: reason}
	sar.TypeMeta = metav1.TypeMeta{Kind: "SubjectAccessReview", APIVersion: "authorization.k8s.io/v1"}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(sar)
}

// forbiddenMessage is kcp's message for a request refused for want of "access": RBAC's
// message with kcp's reason.
func forbiddenMessage(req *http.Request, inner, user string) string {
	r := req.Clone(req.Context())
	r.URL.Path = inner
	info, err := requestInfos.NewRequestInfo(r)
	if err != nil || !info.IsResourceRequest {
		return fmt.Sprintf("forbidden: User %q cannot %s path %q: access denied", user, strings.ToLower(req.Method), inner)
	}
	resource := strings.TrimSuffix(info.Resource+"/"+info.Subresource, "/")
	gr := info.Resource
	if info.APIGroup != "" {
		gr += "." + info.APIGroup
	}
	scope := "at the cluster scope"
	if info.Namespace != "" {
		scope = fmt.Sprintf("in the namespace %q", info.Namespace)
	}
	return fmt.Sprintf("%s %q is forbidden: User %q cannot %s resource %q in API group %q %s: access denied", gr, info.Name, user, info.Verb, resource, info.APIGroup, scope)
}

var requestInfos = &genericapirequest.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

// bound says whether ws binds the export and the binding has settled.
func (k *Kcp) bound(ws *KcpWorkspace) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return ws.Bound && time.Since(ws.boundAt) >= k.Options.BindingDelay
}

// serveMounts is the export's virtual storage in a consumer workspace.
func (k *Kcp) serveMounts(w http.ResponseWriter, req *http.Request, ws *KcpWorkspace, inner string, u KcpUser) {
	if !k.bound(ws) {
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
	if !k.rbac(req.Context(), ws, callerSubject(u), attrs) {
		kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("%s %q is forbidden: User %q cannot %s resource %q in API group %q at the cluster scope: access denied", info.Resource, info.Name, u.Name, info.Verb, strings.TrimSuffix(info.Resource+"/"+info.Subresource, "/"), info.APIGroup))
		return
	}
	k.forwardToMounts(w, req, "/clusters/"+ws.Cluster+inner, u)
}

// serveMountsDiscovery answers the group's discovery: mount-apiserver's wildcard discovery,
// fetched live as kcp does on every uncached discovery request, with the names of the
// APIResourceSchema, which is what kcp serves.
func (k *Kcp) serveMountsDiscovery(w http.ResponseWriter, req *http.Request, inner string) {
	list, err := k.wildcardDiscovery(req.Context())
	if err != nil {
		kcpStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "discovery of mounts.kcp.io failed: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if inner == "/apis/mounts.kcp.io" {
		_ = json.NewEncoder(w).Encode(mountsGroup())
		return
	}
	names, err := k.schema(req.Context())
	if err != nil {
		kcpStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "the export's APIResourceSchema: "+err.Error())
		return
	}
	for i, r := range list.APIResources {
		if r.Name != names.Plural {
			continue
		}
		list.APIResources[i].Kind, list.APIResources[i].SingularName = names.Kind, names.Singular
		list.APIResources[i].ShortNames, list.APIResources[i].Categories = names.ShortNames, names.Categories
	}
	_ = json.NewEncoder(w).Encode(list)
}

func mountsGroup() metav1.APIGroup {
	v := metav1.GroupVersionForDiscovery{GroupVersion: "mounts.kcp.io/v1alpha1", Version: "v1alpha1"}
	return metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: "mounts.kcp.io", Versions: []metav1.GroupVersionForDiscovery{v}, PreferredVersion: v}
}

func (k *Kcp) wildcardDiscovery(ctx context.Context) (*metav1.APIResourceList, error) {
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
	return &list, nil
}

// serveGroups lists the workspace's groups, plus mounts.kcp.io where it is bound and its
// discovery answers. kcp serves no aggregated discovery.
func (k *Kcp) serveGroups(w http.ResponseWriter, req *http.Request, ws *KcpWorkspace) {
	if ws.Kube == nil {
		kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("access to workspace %q denied", ws.Path))
		return
	}
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
	if k.bound(ws) {
		if _, err := k.wildcardDiscovery(req.Context()); err == nil {
			groups.Groups = append(groups.Groups, mountsGroup())
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(groups)
}

// serveOpenAPIIndex merges the workspace's OpenAPI v3 index with mount-apiserver's.
func (k *Kcp) serveOpenAPIIndex(w http.ResponseWriter, req *http.Request, ws *KcpWorkspace, u KcpUser) {
	if ws.Kube == nil {
		kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("access to workspace %q denied", ws.Path))
		return
	}
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
	if k.bound(ws) && shard != nil {
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

// identityHeaders are what the shard adds about the caller to virtual storage: nothing in
// v0.32.3; X-Remote-* and the hop counter in both states of kcp main.
func (k *Kcp) identityHeaders(u KcpUser) http.Header {
	if k.Version == KcpV0323 {
		return http.Header{}
	}
	h := remoteHeaders(u, true)
	h.Set(kcpVirtualResourceHops, "1")
	return h
}

// remoteHeaders name u as kcp names callers to backends: X-Remote-User, -Group (with
// system:authenticated) and -Extra-*, and X-Remote-Uid when withUID.
func remoteHeaders(u KcpUser, withUID bool) http.Header {
	h := http.Header{}
	h.Set("X-Remote-User", u.Name)
	if withUID && u.UID != "" {
		h.Set("X-Remote-Uid", u.UID)
	}
	for _, g := range callerSubject(u).Groups {
		h.Add("X-Remote-Group", g)
	}
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
	k.reverseProxy(w, req, base, path, "", client.Transport, KcpShardClientName, func(h http.Header) {
		stripCaller(h)
		maps.Copy(h, k.identityHeaders(u))
	})
}

// stripCaller removes what the caller sent about its identity, and kcp's own hop headers:
// kcp never forwards them.
func stripCaller(h http.Header) {
	h.Del("Authorization")
	for key := range h {
		if strings.HasPrefix(key, "Impersonate-") || strings.HasPrefix(key, "X-Remote-") || strings.HasPrefix(key, "X-Kcp-") {
			delete(h, key)
		}
	}
}

// reverseProxy sends the request to path at base; rawPath, when not empty, is path as the
// caller encoded it, sent as it came. cert names the client certificate of transport.
func (k *Kcp) reverseProxy(w http.ResponseWriter, req *http.Request, base *url.URL, path, rawPath string, transport http.RoundTripper, cert string, header func(http.Header)) {
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
				k.forwarded = append(k.forwarded, KcpForwarded{Path: path, Header: pr.Out.Header.Clone(), Cert: cert})
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
	k.reverseProxy(w, req, base, inner, "", transport, "", func(h http.Header) {
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

// serveWorkspace answers GET of a child workspace of parent, as tenancy.kcp.io serves it,
// to whoever may "get" it in the parent (without Options.Kinds; with it, Workspaces are
// objects of the parent's kube-apiserver).
func (k *Kcp) serveWorkspace(w http.ResponseWriter, req *http.Request, parent *KcpWorkspace, name string, u KcpUser) {
	if req.Method != http.MethodGet || strings.Contains(name, "/") {
		kcpStatus(w, http.StatusMethodNotAllowed, "MethodNotAllowed", "the harness serves GET of one workspace")
		return
	}
	if !k.rbac(req.Context(), parent, callerSubject(u), authorizationv1.ResourceAttributes{Verb: "get", Group: "tenancy.kcp.io", Resource: "workspaces", Name: name}) {
		kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("workspaces.tenancy.kcp.io %q is forbidden: User %q cannot get resource \"workspaces\" in API group \"tenancy.kcp.io\" in workspace %q", name, u.Name, parent.Path))
		return
	}
	k.mu.Lock()
	ws := k.workspaces[parent.Path+":"+name]
	var phase string
	if ws != nil {
		phase = ws.phase
	}
	k.mu.Unlock()
	if ws == nil {
		kcpStatus(w, http.StatusNotFound, "NotFound", fmt.Sprintf("workspaces.tenancy.kcp.io %q not found", name))
		return
	}
	obj := map[string]any{
		"kind": "Workspace", "apiVersion": "tenancy.kcp.io/v1alpha1",
		"metadata": map[string]any{"name": name, "annotations": map[string]string{"kcp.io/cluster": parent.Cluster}},
		"spec":     map[string]any{"cluster": ws.Cluster, "URL": k.URL + "/clusters/" + ws.Path},
		"status":   map[string]any{"phase": phase},
	}
	if ws.MountName != "" {
		obj["spec"].(map[string]any)["mount"] = map[string]any{"ref": map[string]any{"apiVersion": "mounts.kcp.io/v1alpha1", "kind": "Mount", "name": ws.MountName}}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(obj)
}

// serveMapping is the front-proxy's /services/mounts mapping, for the authenticated u: its
// requestheader certificate and X-Remote-* naming u. A mapping outside /clusters/ forwards
// the original path, as the caller encoded it.
func (k *Kcp) serveMapping(w http.ResponseWriter, req *http.Request, u KcpUser) {
	k.mu.Lock()
	base, fp := k.mountURL, k.frontProxy
	k.mu.Unlock()
	if fp == nil {
		kcpStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", "mapping has no backend")
		return
	}
	k.reverseProxy(w, req, base, req.URL.Path, req.URL.RawPath, fp.Transport, KcpFrontProxyClientName, func(h http.Header) {
		stripCaller(h)
		maps.Copy(h, remoteHeaders(u, true))
	})
}

// exportWorkspace returns the workspace of the export.
func (k *Kcp) exportWorkspace() *KcpWorkspace {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.workspaces[k.exportCluster]
}

// serveAPIExport is the export's virtual workspace. kcp authorizes it in the export's
// workspace: "access", "get" on the APIExport, its "content" with the request's verb, and
// "list apibindings" for the listing of the export's bindings.
func (k *Kcp) serveAPIExport(w http.ResponseWriter, req *http.Request, rest string) {
	u, ok := k.authenticate(req)
	if !ok {
		kcpStatus(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
		return
	}
	exportCluster, rest, _ := strings.Cut(rest, "/")
	exportName, rest, _ := strings.Cut(rest, "/")
	rest, ok = strings.CutPrefix(rest, "clusters/")
	export := k.exportWorkspace()
	if !ok || exportName != KcpExportName || export == nil || exportCluster != export.Cluster {
		kcpStatus(w, http.StatusNotFound, "NotFound", "no such APIExport virtual workspace (kcp names the export's logical cluster, not its path)")
		return
	}
	cluster, inner, _ := strings.Cut(rest, "/")
	inner = "/" + inner
	r := req.Clone(req.Context())
	r.URL.Path = inner
	info, err := requestInfos.NewRequestInfo(r)
	if err != nil {
		kcpStatus(w, http.StatusBadRequest, "BadRequest", err.Error())
		return
	}
	checks := []authorizationv1.ResourceAttributes{
		{Verb: "get", Group: "apis.kcp.io", Resource: "apiexports", Name: KcpExportName},
		{Verb: info.Verb, Group: "apis.kcp.io", Resource: "apiexports", Subresource: "content", Name: KcpExportName},
	}
	if info.APIGroup == "apis.kcp.io" && info.Resource == "apibindings" {
		checks = append(checks, authorizationv1.ResourceAttributes{Verb: info.Verb, Group: "apis.kcp.io", Resource: "apibindings"})
	}
	if !k.access(req.Context(), export, callerSubject(u)) {
		kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("User %q cannot use the virtual workspace of APIExport %q: access denied in workspace %q", u.Name, KcpExportName, export.Path))
		return
	}
	for _, c := range checks {
		if !k.rbac(req.Context(), export, callerSubject(u), c) {
			kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("User %q cannot %s resource %q in API group \"apis.kcp.io\" in workspace %q (APIExport %q)", u.Name, c.Verb, strings.TrimSuffix(c.Resource+"/"+c.Subresource, "/"), export.Path, KcpExportName))
			return
		}
	}
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
