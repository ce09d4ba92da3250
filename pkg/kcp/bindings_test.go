package kcp

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

func binding(cluster, name, export string, deleting bool) apisv1alpha2.APIBinding {
	b := apisv1alpha2.APIBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{ClusterAnnotation: cluster}}}
	if export != "" {
		b.Spec.Reference.Export = &apisv1alpha2.ExportBindingReference{Path: "root:provider", Name: export}
	}
	if deleting {
		now := metav1.Now()
		b.DeletionTimestamp = &now
	}
	return b
}

// TestAPIExportBindings lists the bindings in pages as kcp's APIExport virtual workspace
// serves them; bindings being deleted, or of another export, do not count.
func TestAPIExportBindings(t *testing.T) {
	pages := map[string]apisv1alpha2.APIBindingList{
		"": {ListMeta: metav1.ListMeta{Continue: "page2"}, Items: []apisv1alpha2.APIBinding{
			binding("ws-a", "mounts", "mounts", false),
			binding("ws-b", "mounts-old", "mounts", true),
		}},
		"page2": {Items: []apisv1alpha2.APIBinding{
			binding("ws-c", "other", "widgets", false),
			binding("ws-d", "mounts", "mounts", false),
		}},
	}
	var fail string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer provider-token" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/services/apiexport/root-provider/mounts/clusters/*/apis/apis.kcp.io/v1alpha2/apibindings" {
			http.NotFound(w, r)
			return
		}
		if fail != "" && r.URL.Query().Get("continue") == fail {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"etcd is gone","code":500}`))
			return
		}
		list := pages[r.URL.Query().Get("continue")]
		list.Kind, list.APIVersion = "APIBindingList", "apis.kcp.io/v1alpha2"
		_ = json.NewEncoder(w).Encode(list)
	}))
	defer srv.Close()
	cfg := &rest.Config{BearerToken: "provider-token", TLSClientConfig: rest.TLSClientConfig{CAData: certPEM(srv)}}
	source, err := NewAPIExportBindings(cfg, srv.URL+"/services/apiexport/root-provider/mounts")
	if err != nil {
		t.Fatal(err)
	}
	bound, err := source.BoundClusters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(bound) != 2 || !bound["ws-a"] || !bound["ws-d"] {
		t.Errorf("bound clusters %v, want ws-a and ws-d", bound)
	}

	// A failing second page fails the whole listing.
	fail = "page2"
	if bound, err := source.BoundClusters(context.Background()); err == nil || !strings.Contains(err.Error(), "etcd is gone") {
		t.Errorf("listing with a failing page: %v, %v", bound, err)
	}
	fail = ""

	// Without the provider's credentials kcp refuses.
	anonymous, err := NewAPIExportBindings(&rest.Config{TLSClientConfig: rest.TLSClientConfig{CAData: certPEM(srv)}}, srv.URL+"/services/apiexport/root-provider/mounts")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anonymous.BoundClusters(context.Background()); err == nil {
		t.Error("listing without credentials succeeded")
	}

	// A binding without its cluster is no kcp listing.
	pages["page2"] = apisv1alpha2.APIBindingList{Items: []apisv1alpha2.APIBinding{{ObjectMeta: metav1.ObjectMeta{Name: "stray"}}}}
	if _, err := source.BoundClusters(context.Background()); err == nil || !strings.Contains(err.Error(), ClusterAnnotation) {
		t.Errorf("binding without cluster: %v", err)
	}
	if ClusterOf(&metav1.ObjectMeta{}) != clusters.DefaultCluster {
		t.Error("an object without annotation is not of the default cluster")
	}
}

func certPEM(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}
