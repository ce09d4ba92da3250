package proxy

import (
	"bufio"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// serveProxied serves one request through p for m at path as alice, over a real server (so
// that upgrades can hijack), and returns the answer.
func serveProxied(t *testing.T, p *Proxier, m mountGetter, method, path string, upgrade bool) *http.Response {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := genericapirequest.WithUser(req.Context(), &user.DefaultInfo{Name: "alice", Groups: []string{"dev"}})
		h, err := p.Handler(ctx, m(), path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusTeapot)
			return
		}
		h.ServeHTTP(w, req.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest(method, srv.URL+"/apis/mounts.kcp.io/v1alpha1/mounts/m/proxy"+path, nil)
	if upgrade {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

type mountGetter func() *mounts.Mount

// TestTargetRefusingTheMountsCredentials: a target's 401 is about the mount's credentials (the
// caller's never reach it), so it becomes this server's 502 naming the mount and its Secret,
// for plain requests, discovery roots (as text) and upgrades alike; kubectl said "You must
// be logged in" about the caller's login to this server. The target's other answers (403 of
// its RBAC, 404, 409, 422) pass as the target gave them.
func TestTargetRefusingTheMountsCredentials(t *testing.T) {
	var answer int
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Www-Authenticate", `Basic realm="kubernetes-master"`)
		w.WriteHeader(answer)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the target's own %d","reason":"Whatever","code":%d}`, answer, answer)
	}))
	t.Cleanup(srv.Close)
	secrets := secretMap{}
	secrets.add(t, "creds", srv.URL, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	p := &Proxier{Secrets: secrets, Transports: NewTransports(TransportOptions{}, nil)}
	m := func() *mounts.Mount { return testMount("m", "creds") }

	answer = http.StatusUnauthorized
	for _, c := range []struct {
		path    string
		upgrade bool
		text    bool
	}{
		{"/api/v1/namespaces", false, false},
		{"/api/v1/namespaces?watch=true", false, false},
		{"/apis", false, true},
		{"/api/v1/namespaces/default/pods/p/exec?command=sh", true, false},
	} {
		resp := serveProxied(t, p, m, http.MethodGet, c.path, c.upgrade)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Www-Authenticate") != "" || resp.Header.Get("Retry-After") != "" {
			t.Errorf("%s: %d %v %s, want 502 without Www-Authenticate and Retry-After", c.path, resp.StatusCode, resp.Header, body)
			continue
		}
		const says = "did not accept the mount's credentials: the kubeconfig of Secret ns/creds needs credentials that the target accepts"
		if c.text {
			if !strings.HasPrefix(string(body), "mount 'm': the mount's target") || !strings.Contains(string(body), says) {
				t.Errorf("%s: %q", c.path, body)
			}
			continue
		}
		var status metav1.Status
		if err := json.Unmarshal(body, &status); err != nil || status.Code != http.StatusBadGateway || status.Reason != ReasonBadGateway ||
			!strings.HasPrefix(status.Message, `mount "m": the mount's target`) || !strings.Contains(status.Message, says) {
			t.Errorf("%s: %v %s", c.path, err, body)
		}
	}

	for _, code := range []int{http.StatusForbidden, http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity} {
		answer = code
		for _, upgrade := range []bool{false, true} {
			path := "/api/v1/namespaces"
			if upgrade {
				path = "/api/v1/namespaces/default/pods/p/exec?command=sh"
			}
			resp := serveProxied(t, p, m, http.MethodGet, path, upgrade)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != code || !strings.Contains(string(body), fmt.Sprintf("the target's own %d", code)) {
				t.Errorf("the target's %d (upgrade %v) became %d %s", code, upgrade, resp.StatusCode, body)
			}
		}
	}
}

// TestHopFailuresNameTheMount: failures to resolve a mount's credentials are answered by the
// handler, naming the mount, without Retry-After, and as text with 502 to a discovery root.
func TestHopFailuresNameTheMount(t *testing.T) {
	p := &Proxier{Secrets: secretMap{}, Transports: NewTransports(TransportOptions{}, nil)}
	m := func() *mounts.Mount { return testMount("m", "missing") }
	resp := serveProxied(t, p, m, http.MethodGet, "/api/v1/namespaces", false)
	body, _ := io.ReadAll(resp.Body)
	var status metav1.Status
	if err := json.Unmarshal(body, &status); err != nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "" ||
		status.Message != `mount "m": its Secret ns/missing does not exist` {
		t.Errorf("missing Secret: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	for _, root := range []string{"/api", "/apis", "/apis/"} {
		resp = serveProxied(t, p, m, http.MethodGet, root, false)
		body, _ = io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || string(body) != "mount 'm': its Secret ns/missing does not exist\n" {
			t.Errorf("missing Secret, %s: %d %v %q", root, resp.StatusCode, resp.Header, body)
		}
	}
	// Not a discovery root: a POST, a group's discovery, an upgrade.
	for _, c := range []struct {
		method, path string
		upgrade      bool
	}{{http.MethodPost, "/api", false}, {http.MethodGet, "/apis/apps/v1", false}, {http.MethodGet, "/api", true}} {
		resp = serveProxied(t, p, m, c.method, c.path, c.upgrade)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s (upgrade %v): %d %v", c.method, c.path, c.upgrade, resp.StatusCode, resp.Header)
		}
	}
}

// A reset of an established connection is a target that cut it (502): whether the kernel sends
// a reset or a FIN depends on whether the target had read the whole request when it closed,
// which made TestHostileTargets/statuses flaky (503 where 502 was wanted) under load.
func TestResetIsNoUnreachableTarget(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: &net.OpError{Op: "read", Err: syscall.ECONNRESET}}
	if s := statusForError("t:443", reset); s.Code != http.StatusBadGateway || !strings.Contains(s.Message, "closed the connection before it answered") {
		t.Errorf("reset: %d %q", s.Code, s.Message)
	}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	if s := statusForError("t:443", refused); s.Code != http.StatusServiceUnavailable {
		t.Errorf("refused: %d %q", s.Code, s.Message)
	}
	// Whatever a closing target makes of a cut HTTP/2 frame, the answer is 502.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// Reads part of the request, answers a cut status line and closes with unread
			// bytes: the kernel resets the connection.
			_, _ = bufio.NewReader(c).Peek(1)
			_, _ = io.WriteString(c, "HTTP/1.1 200 O")
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			c.Close()
		}
	}()
	_, err = http.Post("http://"+ln.Addr().String(), "text/plain", strings.NewReader(strings.Repeat("x", 1<<20)))
	if err == nil {
		t.Fatal("no error from a target that cut the connection")
	}
	if s := statusForError(ln.Addr().String(), err); s.Code != http.StatusBadGateway {
		t.Errorf("%v: %d %q, want 502", err, s.Code, s.Message)
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		t.Logf("the cut connection gave %v", err)
	}
}
