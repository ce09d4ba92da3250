package kcp

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"slices"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
)

func clientCert(t *testing.T, ca *pki.CA, cn string, orgs ...string) *x509.Certificate {
	t.Helper()
	cert, _, err := ca.Issue(&x509.Certificate{Subject: pkix.Name{CommonName: cn, Organization: orgs}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func verifyWith(ca *pki.CA) x509request.VerifyOptionFunc {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	return func() (x509.VerifyOptions, bool) {
		return x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true
	}
}

func request(cert *x509.Certificate, header http.Header) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, "https://127.0.0.1/clusters/abc/apis/mounts.kcp.io/v1alpha1/mounts", nil)
	if header != nil {
		req.Header = header
	}
	if cert != nil {
		req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	}
	return req
}

// TestShardAuthenticator: only the shard's certificate makes a request kcp-authorized; what
// kcp main names is the caller, and without a name the caller is nobody.
func TestShardAuthenticator(t *testing.T) {
	shardCA, _ := pki.NewCA("shard")
	otherCA, _ := pki.NewCA("other")
	auth := ShardAuthenticator(verifyWith(shardCA), headerrequest.StaticStringSlice{"kcp-shard"}, []string{"ops:root"})

	resp, ok, err := auth.AuthenticateRequest(request(clientCert(t, shardCA, "kcp-shard"), nil))
	if !ok || err != nil || resp.User.GetName() != ForwardedWithoutIdentityUser || !slices.Equal(resp.User.GetGroups(), []string{AuthorizedByKcpGroup, ThroughKcpGroup}) {
		t.Errorf("v0.32.3 forward: %v %v %+v", ok, err, resp)
	}
	h := http.Header{"X-Remote-User": {"alice"}, "X-Remote-Group": {"team"}, "X-Remote-Extra-Scopes": {"s"}}
	req := request(clientCert(t, shardCA, "kcp-shard"), h)
	resp, ok, err = auth.AuthenticateRequest(req)
	if !ok || err != nil || resp.User.GetName() != "alice" || !slices.Equal(resp.User.GetGroups(), []string{"team", AuthorizedByKcpGroup, ThroughKcpGroup}) || resp.User.GetExtra()["scopes"][0] != "s" {
		t.Errorf("kcp main forward: %v %v %+v", ok, err, resp)
	}
	if len(req.Header) != 0 {
		t.Errorf("identity headers left on the request: %v", req.Header)
	}
	// Whoever names the stand-in for nobody is nobody.
	resp, _, _ = auth.AuthenticateRequest(request(clientCert(t, shardCA, "kcp-shard"), http.Header{"X-Remote-User": {ForwardedWithoutIdentityUser}, "X-Remote-Group": {"system:masters"}}))
	if !HasNoIdentity(resp.User) || slices.Contains(resp.User.GetGroups(), "system:masters") {
		t.Errorf("a forward naming nobody: %+v", resp.User)
	}
	// No header makes an administrator: the privileged groups are dropped.
	resp, _, _ = auth.AuthenticateRequest(request(clientCert(t, shardCA, "kcp-shard"), http.Header{"X-Remote-User": {"eve"}, "X-Remote-Group": {"system:kcp:admin", "system:masters", "ops:root", "team"}}))
	if resp.User.GetName() != "eve" || !slices.Equal(resp.User.GetGroups(), []string{"team", AuthorizedByKcpGroup, ThroughKcpGroup}) {
		t.Errorf("a forward naming privileged groups: %+v", resp.User)
	}
	for name, req := range map[string]*http.Request{
		"no certificate":         request(nil, http.Header{"X-Remote-User": {"alice"}}),
		"another CA":             request(clientCert(t, otherCA, "kcp-shard"), http.Header{"X-Remote-User": {"alice"}}),
		"a name not allowed":     request(clientCert(t, shardCA, "someone"), http.Header{"X-Remote-User": {"alice"}}),
		"another CA, no headers": request(clientCert(t, otherCA, "kcp-shard"), nil),
	} {
		if resp, ok, _ := auth.AuthenticateRequest(req); ok {
			t.Errorf("%s: authenticated as %+v", name, resp.User)
		}
	}
}

// TestNotAuthorizedByKcp: no other authenticator can claim kcp's authorization.
func TestNotAuthorizedByKcp(t *testing.T) {
	claims := authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
		return &authenticator.Response{User: &user.DefaultInfo{Name: "mallory", Groups: []string{"x", AuthorizedByKcpGroup}}}, true, nil
	})
	resp, ok, err := NotAuthorizedByKcp(claims).AuthenticateRequest(request(nil, nil))
	if !ok || err != nil || resp.User.GetName() != "mallory" || !slices.Equal(resp.User.GetGroups(), []string{"x"}) {
		t.Errorf("%v %v %+v", ok, err, resp.User)
	}
}

type recordingAuthorizer struct {
	authorizer.Authorizer
	calls int
}

func (r *recordingAuthorizer) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	r.calls++
	return authorizer.DecisionAllow, "", nil
}

// TestClusterAuthorizer: in a logical cluster, kcp's requests get what kcp authorized and no
// more; everybody else needs kcp's RBAC, which without --kcp-kubeconfig nobody has.
func TestClusterAuthorizer(t *testing.T) {
	delegate := &recordingAuthorizer{}
	authz := ClusterAuthorizer{Delegate: delegate, AdminGroups: []string{"admins"}}
	nobody := &user.DefaultInfo{Name: ForwardedWithoutIdentityUser, Groups: []string{AuthorizedByKcpGroup}}
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{AuthorizedByKcpGroup}}
	direct := &user.DefaultInfo{Name: "alice"}
	admin := &user.DefaultInfo{Name: "root", Groups: []string{"admins"}}
	info := &genericapirequest.RequestInfo{IsResourceRequest: true, Verb: "patch", APIGroup: "mounts.kcp.io", Resource: "mounts", Name: "m"}
	ctx := genericapirequest.WithRequestInfo(clusters.WithCluster(context.Background(), "abc"), info)
	attrs := func(u user.Info, verb, sub string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, APIGroup: "mounts.kcp.io", Resource: "mounts", Subresource: sub, Name: "m", ResourceRequest: true}
	}
	for _, c := range []struct {
		name string
		ctx  context.Context
		a    authorizer.AttributesRecord
		want authorizer.Decision
	}{
		{"kcp's request itself", ctx, attrs(nobody, "patch", ""), authorizer.DecisionAllow},
		{"create by server-side apply", ctx, attrs(nobody, "create", ""), authorizer.DecisionAllow},
		{"lend for nobody", ctx, attrs(nobody, "lend", ""), authorizer.DecisionDeny},
		{"another subresource for nobody", ctx, attrs(nobody, "patch", "status"), authorizer.DecisionDeny},
		{"lend for a named caller without reviews", ctx, attrs(alice, "lend", ""), authorizer.DecisionDeny},
		{"a direct caller without reviews", ctx, attrs(direct, "patch", ""), authorizer.DecisionDeny},
		{"a direct caller in all clusters", clusters.WithCluster(ctx, clusters.Wildcard), attrs(direct, "list", ""), authorizer.DecisionDeny},
		{"an administrator", ctx, attrs(admin, "lend", ""), authorizer.DecisionAllow},
		{"kcp's group named like the administrators", ctx, attrs(&user.DefaultInfo{Name: "eve", Groups: []string{"admins", ThroughKcpGroup}}, "lend", ""), authorizer.DecisionDeny},
		{"the default cluster through kcp", context.Background(), attrs(&user.DefaultInfo{Name: "eve", Groups: []string{"admins", ThroughKcpGroup}}, "get", ""), authorizer.DecisionDeny},
	} {
		if got, reason, _ := authz.Authorize(c.ctx, c.a); got != c.want {
			t.Errorf("%s: %v (%s), want %v", c.name, got, reason, c.want)
		}
	}
	before := delegate.calls
	if got, _, _ := authz.Authorize(context.Background(), attrs(direct, "get", "")); got != authorizer.DecisionAllow || delegate.calls != before+1 {
		t.Errorf("the default cluster is the delegate's: %v", got)
	}
	// Nobody is never reviewed: there is no one to ask about.
	if got, reason, _ := (&WorkspaceReviews{}).Authorize(ctx, attrs(nobody, "get", "")); got != authorizer.DecisionDeny || reason == "" {
		t.Errorf("reviews of nobody: %v %q", got, reason)
	}
}

// TestFrontProxyAuthenticator: the front-proxy names callers, but cannot claim kcp's
// authorization for them.
func TestFrontProxyAuthenticator(t *testing.T) {
	ca, _ := pki.NewCA("front-proxy")
	auth := FrontProxyAuthenticator(verifyWith(ca), headerrequest.StaticStringSlice{"kcp-front-proxy"}, []string{"ops:root"})
	resp, ok, err := auth.AuthenticateRequest(request(clientCert(t, ca, "kcp-front-proxy"), http.Header{"X-Remote-User": {"alice"}, "X-Remote-Group": {"team", AuthorizedByKcpGroup}}))
	if !ok || err != nil || resp.User.GetName() != "alice" || !slices.Equal(resp.User.GetGroups(), []string{"team", ThroughKcpGroup}) {
		t.Errorf("%v %v %+v", ok, err, resp.User)
	}
	if _, ok, _ := auth.AuthenticateRequest(request(clientCert(t, ca, "mallory"), http.Header{"X-Remote-User": {"alice"}})); ok {
		t.Error("a certificate with a name not allowed authenticated")
	}
	resp, _, _ = auth.AuthenticateRequest(request(clientCert(t, ca, "kcp-front-proxy"), http.Header{"X-Remote-User": {"eve"}, "X-Remote-Group": {"system:kcp:admin", "ops:root", "system:masters"}}))
	if resp.User.GetName() != "eve" || !slices.Equal(resp.User.GetGroups(), []string{ThroughKcpGroup}) {
		t.Errorf("privileged groups through the front-proxy: %+v", resp.User)
	}
}
