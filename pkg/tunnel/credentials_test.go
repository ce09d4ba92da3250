package tunnel_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent"
	"github.com/kcp-dev/mount-apiserver/pkg/tunnel/agent/agenttest"
)

// tokens authenticates bearer tokens it holds, as a token review would.
type tokens struct {
	mu    sync.Mutex
	users map[string]string // token -> user name
}

func (tk *tokens) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return nil, false, nil
	}
	tk.mu.Lock()
	defer tk.mu.Unlock()
	name, ok := tk.users[token]
	if !ok {
		return nil, false, errors.New("invalid bearer token")
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: name, UID: "uid-of-" + name}}, true, nil
}

func (tk *tokens) set(token, name string) {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	if name == "" {
		delete(tk.users, token)
	} else {
		tk.users[token] = name
	}
}

// TestRevokedCredentialsCloseTheSession: an agent's session lasts only while the credentials
// it attached with still authenticate it as the same user: a deleted token, or a token that
// now names someone else, ends it at the next check; the Authorization header the
// authentication filter removed was kept for that. Without kept credentials, an attach is
// refused rather than left unchecked.
func TestRevokedCredentialsCloseTheSession(t *testing.T) {
	for _, revoke := range []string{"deleted", "reissued to another user"} {
		t.Run(revoke, func(t *testing.T) {
			tk := &tokens{users: map[string]string{"agent-token": "edge-agent"}}
			sessions := tunnel.NewSessions(nil, tunnel.Limits{})
			t.Cleanup(sessions.CloseAll)
			m := &mounts.Mount{ObjectMeta: metav1.ObjectMeta{Name: "edge", UID: "uid-1"}, Spec: mounts.MountSpec{Tunnel: &mounts.MountTunnel{}}}
			attacher := &tunnel.Attacher{Sessions: sessions, Authenticator: tk, Interval: 50 * time.Millisecond}
			// The generic chain's order: credentials kept, then authentication, which takes
			// the Authorization header away.
			srv := httptest.NewServer(tunnel.KeepAttachCredentials(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
				resp, ok, err := tk.AuthenticateRequest(req)
				if err != nil || !ok {
					w.WriteHeader(http.StatusUnauthorized)
					return
				}
				req.Header.Del("Authorization")
				ctx := genericapirequest.WithUser(req.Context(), resp.User)
				handler, err := attacher.Handler(ctx, m)
				if err != nil {
					w.WriteHeader(http.StatusForbidden)
					return
				}
				handler.ServeHTTP(w, req.WithContext(ctx))
			})))
			t.Cleanup(srv.Close)
			url, err := agent.AttachURL(srv.URL, "", "edge")
			if err != nil {
				t.Fatal(err)
			}
			a := agenttest.Run(t, &agent.Config{Hub: &rest.Config{Host: srv.URL, BearerToken: "agent-token"}, AttachURL: url, Mount: "edge", Target: "127.0.0.1:1", MaxBackoff: time.Second})
			key := tunnel.SessionKey(clusters.DefaultCluster, m.UID)
			waitFor(t, "the session", func() bool { _, ok := sessions.Connected(key); return ok && a.Connected() })
			// Checked again and again with the kept token: the session lives.
			time.Sleep(300 * time.Millisecond)
			if _, ok := sessions.Connected(key); !ok {
				t.Fatal("the session ended while its token was valid")
			}
			if revoke == "deleted" {
				tk.set("agent-token", "")
			} else {
				tk.set("agent-token", "someone-else")
			}
			waitFor(t, "the session to close", func() bool { _, ok := sessions.Connected(key); return !ok })
		})
	}

	// No kept credentials (KeepAttachCredentials missing from the chain): refused.
	attacher := &tunnel.Attacher{Sessions: tunnel.NewSessions(nil, tunnel.Limits{}), Authenticator: &tokens{}}
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "edge-agent"})
	m := &mounts.Mount{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: mounts.MountSpec{Tunnel: &mounts.MountTunnel{}}}
	if _, err := attacher.Handler(ctx, m); err == nil || !strings.Contains(err.Error(), "KeepAttachCredentials") {
		t.Fatalf("attach without kept credentials: %v", err)
	}
}
