package authentication

import (
	"context"
	"errors"
	"flag"
	"net/http"
	"slices"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/klog/v2"
)

// tokenlessChain stands in for the generic delegated chain without tokens: the front proxy's
// X-Remote-User, else anonymous; it fails when it sees a token header, which it never should.
var tokenlessChain = authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
	if req.Header.Get("Authorization") != "" || req.Header.Get("Sec-WebSocket-Protocol") != "" {
		return nil, false, errors.New("the chain saw a token header")
	}
	if name := req.Header.Get("X-Remote-User"); name != "" {
		req.Header.Del("X-Remote-User")
		return &authenticator.Response{User: &user.DefaultInfo{Name: name, Groups: []string{user.AllAuthenticated}}}, true, nil
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: user.Anonymous}}, true, nil
})

// TestTokensWithoutBodies: tokens are reviewed under a logger that cannot log bodies even at
// -v=10, whose cache calls the reviewer with a context of its own; the chain's identities come
// first; a bad token is an error, no token is the chain's answer.
func TestTokensWithoutBodies(t *testing.T) {
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	if err := fs.Set("v", "10"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fs.Set("v", "0") })

	reviews := 0
	review := authenticator.TokenFunc(func(ctx context.Context, token string) (*authenticator.Response, bool, error) {
		reviews++
		if klog.FromContext(ctx).V(8).Enabled() {
			t.Error("the reviewer's logger logs bodies (V(8) is enabled)")
		}
		if token != "good" {
			return nil, false, nil
		}
		return &authenticator.Response{User: &user.DefaultInfo{Name: "token-user"}}, true, nil
	})
	a := TokensWithoutBodies(tokenlessChain, review, time.Minute)
	req := func(headers ...string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "https://example/", nil)
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Set(headers[i], headers[i+1])
		}
		return r
	}

	r := req("Authorization", "Bearer good")
	resp, ok, err := a.AuthenticateRequest(r)
	if err != nil || !ok || resp.User.GetName() != "token-user" || !slices.Contains(resp.User.GetGroups(), user.AllAuthenticated) {
		t.Fatalf("good token: %v %v %v", resp, ok, err)
	}
	if r.Header.Get("Authorization") != "" {
		t.Error("an accepted token stays on the request")
	}
	if _, _, _ = a.AuthenticateRequest(req("Authorization", "Bearer good")); reviews != 1 {
		t.Errorf("%d reviews of one token, want 1 (cached)", reviews)
	}

	r = req("Authorization", "Bearer good", "X-Remote-User", "front")
	if resp, ok, err := a.AuthenticateRequest(r); err != nil || !ok || resp.User.GetName() != "front" {
		t.Errorf("front proxy with a token: %v %v %v, want the front proxy's user", resp, ok, err)
	}
	if r.Header.Get("Authorization") != "Bearer good" || r.Header.Get("X-Remote-User") != "" {
		t.Errorf("headers after the front proxy's request: %v", r.Header)
	}

	if _, ok, err := a.AuthenticateRequest(req("Authorization", "Bearer bad")); ok || err == nil {
		t.Errorf("bad token: ok %v, err %v; want an error", ok, err)
	}
	if resp, ok, err := a.AuthenticateRequest(req()); err != nil || !ok || resp.User.GetName() != user.Anonymous {
		t.Errorf("no token: %v %v %v, want anonymous", resp, ok, err)
	}
	r = req("Sec-WebSocket-Protocol", "v5.channel.k8s.io")
	if resp, ok, err := a.AuthenticateRequest(r); err != nil || !ok || resp.User.GetName() != user.Anonymous || r.Header.Get("Sec-WebSocket-Protocol") != "v5.channel.k8s.io" {
		t.Errorf("WebSocket without a token: %v %v %v, protocol %q", resp, ok, err, r.Header.Get("Sec-WebSocket-Protocol"))
	}
	// base64url("good") without padding.
	r = req("Sec-WebSocket-Protocol", "base64url.bearer.authorization.k8s.io.Z29vZA, v5.channel.k8s.io", "Connection", "Upgrade", "Upgrade", "websocket")
	if resp, ok, err := a.AuthenticateRequest(r); err != nil || !ok || resp.User.GetName() != "token-user" {
		t.Errorf("WebSocket token: %v %v %v", resp, ok, err)
	}
}
