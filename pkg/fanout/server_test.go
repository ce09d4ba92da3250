package fanout

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// TestRefusedBeforeAnyMember: a fan-out that has passed a mount proxy (a loop back to the
// hub), a write, and an Accept without JSON are answered before any mount is listed or asked.
func TestRefusedBeforeAnyMember(t *testing.T) {
	listed := 0
	list := func(context.Context, labels.Selector) ([]*mounts.Mount, error) { listed++; return nil, nil }
	s := &Server{Transport: func(*mounts.Mount) http.RoundTripper { t.Fatal("a member was asked"); return nil }}
	ctx := genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"})
	for _, c := range []struct {
		method string
		header http.Header
		code   int
		says   string
	}{
		{http.MethodGet, http.Header{HopsHeader: {"1"}}, http.StatusLoopDetected, "passed a mount proxy"},
		{http.MethodPost, nil, http.StatusMethodNotAllowed, "POST is no read"},
		{http.MethodGet, http.Header{"Accept": {"application/vnd.kubernetes.protobuf"}}, http.StatusNotAcceptable, "JSON only"},
	} {
		h, err := s.Handler(ctx, list, "api/v1/pods")
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(c.method, "/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy/api/v1/pods", nil).WithContext(ctx)
		for k, v := range c.header {
			req.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != c.code || !strings.Contains(w.Body.String(), c.says) {
			t.Errorf("%s %v: %d %s", c.method, c.header, w.Code, w.Body.String())
		}
	}
	if listed != 0 {
		t.Errorf("mounts were listed %d times", listed)
	}
	if _, err := s.Handler(context.Background(), list, "api/v1/pods"); err == nil {
		t.Error("a request without a user was served")
	}
}
