package apiserver

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"
)

// TestBoundYAMLBodies: a YAML body whose aliases expand it beyond the request body bound is
// refused with 400 before the handler decodes it; other bodies reach the handler as they came.
func TestBoundYAMLBodies(t *testing.T) {
	var got string
	handler := boundYAMLBodies(func(h http.Handler, _ *genericapiserver.Config) http.Handler { return h })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got = string(b)
			w.WriteHeader(http.StatusCreated)
		}), &genericapiserver.Config{MaxRequestBodyBytes: 3 << 20})

	var bomb strings.Builder
	bomb.WriteString("apiVersion: mounts.kcp.io/v1alpha1\nkind: Mount\nmetadata:\n  name: m\n  annotations:\n    x: &a " + strings.Repeat("z", 100<<10) + "\nspec:\n  y: [")
	for i := range 1000 {
		if i > 0 {
			bomb.WriteString(",")
		}
		fmt.Fprint(&bomb, "*a")
	}
	bomb.WriteString("]\n")
	anchors := "metadata:\n  name: m\n  labels: &l {app: x}\n  annotations: *l\n"
	for _, c := range []struct {
		name, verb, contentType, body string
		code                          int
	}{
		{"aliases of 100 MiB", "create", "application/yaml", bomb.String(), http.StatusBadRequest},
		{"aliases of 100 MiB in an apply patch", "patch", "application/apply-patch+yaml; charset=utf-8", bomb.String(), http.StatusBadRequest},
		{"anchors within the bound", "create", "application/yaml", anchors, http.StatusCreated},
		{"JSON", "create", "application/json", `{"metadata":{"name":"*m"}}`, http.StatusCreated},
		{"a read", "get", "application/yaml", bomb.String(), http.StatusCreated},
	} {
		t.Run(c.name, func(t *testing.T) {
			got = ""
			req := httptest.NewRequest(http.MethodPost, "/apis/mounts.kcp.io/v1alpha1/mounts", strings.NewReader(c.body))
			req.Header.Set("Content-Type", c.contentType)
			req = req.WithContext(genericapirequest.WithRequestInfo(req.Context(), &genericapirequest.RequestInfo{
				IsResourceRequest: true, Verb: c.verb, APIGroup: "mounts.kcp.io", APIVersion: "v1alpha1", Resource: "mounts"}))
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			if rec.Code != c.code {
				t.Fatalf("%d %.300s, want %d", rec.Code, rec.Body, c.code)
			}
			if c.code == http.StatusBadRequest && !strings.Contains(rec.Body.String(), "aliases expand") {
				t.Fatalf("%s", rec.Body)
			}
			if c.code != http.StatusBadRequest && got != c.body {
				t.Fatalf("the handler read %d bytes of %d", len(got), len(c.body))
			}
		})
	}
}
