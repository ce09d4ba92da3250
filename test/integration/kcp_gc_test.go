package integration

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// apiExportStandIn serves what kcp's APIExport virtual workspace serves for apibindings
// (kcp cannot be built here; DESIGN.md section 1): a read-only, paginated
// apis.kcp.io/v1alpha2 APIBindingList of the export's bindings across all clusters at
// /services/apiexport/<cluster>/<export>/clusters/*/apis/apis.kcp.io/v1alpha2/apibindings,
// each binding carrying its logical cluster in kcp.io/cluster and kcp's export label. It
// refuses requests without the provider's token (401) and anything but GET (405), as kcp
// would. It answers one binding per page, so a listing takes several requests; with
// failEvery > 0, every failEvery-th listing fails on its last page (a partial listing).
type apiExportStandIn struct {
	srv   *httptest.Server
	token string

	mu        sync.Mutex
	bound     []string
	failEvery int
	listings  int // listings begun
	failed    int
}

const (
	exportCluster = "root-provider"
	exportName    = "mounts"
	exportPath    = "/services/apiexport/" + exportCluster + "/" + exportName
)

func startAPIExportStandIn(t *testing.T, token string, bound ...string) *apiExportStandIn {
	t.Helper()
	s := &apiExportStandIn{token: token, bound: bound}
	s.srv = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *apiExportStandIn) set(failEvery int, bound ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bound, s.failEvery = bound, failEvery
}

// counts returns the listings begun and failed so far.
func (s *apiExportStandIn) counts() (listings, failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listings, s.failed
}

func writeAPIStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Reason: reason, Message: message, Code: int32(code)})
}

func (s *apiExportStandIn) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		writeAPIStatus(w, http.StatusUnauthorized, metav1.StatusReasonUnauthorized, "Unauthorized")
		return
	}
	if r.URL.Path != exportPath+"/clusters/*/apis/apis.kcp.io/v1alpha2/apibindings" {
		writeAPIStatus(w, http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource")
		return
	}
	if r.Method != http.MethodGet || r.URL.Query().Get("watch") != "" {
		writeAPIStatus(w, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "apibindings are read-only in the APIExport virtual workspace")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	page := 0
	if c := r.URL.Query().Get("continue"); c != "" {
		page, _ = strconv.Atoi(c)
	} else {
		s.listings++
	}
	last := page >= len(s.bound)-1
	if last && s.failEvery > 0 && s.listings%s.failEvery == 0 {
		s.failed++
		writeAPIStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "etcdserver: request timed out")
		return
	}
	list := apisv1alpha2.APIBindingList{TypeMeta: metav1.TypeMeta{Kind: "APIBindingList", APIVersion: "apis.kcp.io/v1alpha2"},
		ListMeta: metav1.ListMeta{ResourceVersion: "4711"}}
	if page < len(s.bound) {
		cluster := s.bound[page]
		list.Items = append(list.Items, apisv1alpha2.APIBinding{
			TypeMeta: metav1.TypeMeta{Kind: "APIBinding", APIVersion: "apis.kcp.io/v1alpha2"},
			ObjectMeta: metav1.ObjectMeta{Name: "mounts", UID: types.UID("binding-of-" + cluster), ResourceVersion: "4711",
				Annotations: map[string]string{kcp.ClusterAnnotation: cluster},
				Labels:      map[string]string{apisv1alpha1.InternalAPIBindingExportLabelKey: "export-label-hash"}},
			Spec:   apisv1alpha2.APIBindingSpec{Reference: apisv1alpha2.BindingReference{Export: &apisv1alpha2.ExportBindingReference{Path: "root:provider", Name: exportName}}},
			Status: apisv1alpha2.APIBindingStatus{Phase: apisv1alpha2.APIBindingPhaseBound},
		})
	}
	if !last {
		list.Continue = strconv.Itoa(page + 1)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(list)
}

// kubeconfig writes the provider's kubeconfig for --kcp-kubeconfig: kcp's URL (here the
// stand-in's), its CA and the provider's token.
func (s *apiExportStandIn) kubeconfig(t *testing.T) string {
	t.Helper()
	data, err := framework.KubeconfigBytes(&rest.Config{Host: s.srv.URL, BearerToken: s.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.srv.Certificate().Raw})}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kcp.kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestUnboundClustersLoseTheirMounts: kcp runs no garbage collection for Mounts. Three
// logical clusters bind the export and hold Mounts; one unbinds. While the listing of
// bindings fails every other time, nothing is deleted; once two listings in a row succeed,
// the unbound cluster's Mounts are gone and the others' (and the default cluster's) stay.
func TestUnboundClustersLoseTheirMounts(t *testing.T) {
	ctx := context.Background()
	standIn := startAPIExportStandIn(t, "provider-token", "ws-a", "ws-b", "ws-c")
	s := framework.StartInProcess(t, "", func(o *options.Options) {
		apiOnly(o)
		o.KcpMode = true
		o.Kcp.Kubeconfig = standIn.kubeconfig(t)
		o.Kcp.APIExportURL = standIn.srv.URL + exportPath
		o.Kcp.UnboundGCInterval = 100 * time.Millisecond
	})
	clustersMounts := map[string][]string{"ws-a": {"m1"}, "ws-b": {"m1", "m2"}, "ws-c": {"m1", "m3"}}
	for cluster, names := range clustersMounts {
		for _, name := range names {
			if _, err := mountsIn(t, s.Config, cluster).Create(ctx, workspaceMount(name, "root:"+cluster), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.Client.MountsV1alpha1().Mounts().Create(ctx, workspaceMount("m1", "root:default"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Creation timestamps have whole seconds; only Mounts created a second before the first
	// listing that finds their cluster unbound may go.
	time.Sleep(1100 * time.Millisecond)

	exist := func(cluster, name string) bool {
		t.Helper()
		var err error
		if cluster == "" {
			_, err = s.Client.MountsV1alpha1().Mounts().Get(ctx, name, metav1.GetOptions{})
		} else {
			_, err = mountsIn(t, s.Config, cluster).Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	waitListings := func(n int) {
		t.Helper()
		start, _ := standIn.counts()
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if listings, _ := standIn.counts(); listings >= start+n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the collector did not list bindings %d times within a minute", n)
			}
		}
	}
	checkAll := func(when string, gone map[string]bool) {
		t.Helper()
		for cluster, names := range clustersMounts {
			for _, name := range names {
				if exist(cluster, name) == gone[cluster] {
					t.Errorf("%s: mount %s of %s exists: %v", when, name, cluster, !gone[cluster])
				}
			}
		}
		if !exist("", "m1") {
			t.Errorf("%s: the default cluster's mount is gone", when)
		}
	}

	waitListings(3)
	checkAll("all clusters bound", nil)

	// ws-c unbinds, and every second listing fails on its last page: never two good
	// listings in a row, so nothing goes.
	standIn.set(2, "ws-a", "ws-b")
	waitListings(8)
	// Of 8 listings every second one fails; the last may still be under way.
	if _, failed := standIn.counts(); failed < 3 {
		t.Fatalf("only %d listings failed", failed)
	}
	checkAll("ws-c unbound, every other listing failing", nil)

	// The listings succeed: ws-c's mounts go, the others stay.
	standIn.set(0, "ws-a", "ws-b")
	for deadline := time.Now().Add(time.Minute); exist("ws-c", "m1") || exist("ws-c", "m3"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("ws-c's mounts are still there a minute after two good listings could have found ws-c unbound")
		}
	}
	checkAll("ws-c unbound", map[string]bool{"ws-c": true})
	if got, err := framework.Metric(s.Config, "mount_unbound_gc_deletions_total"); err != nil || got < 2 {
		t.Errorf("deletions counted: %d %v, want at least 2", got, err)
	}
	if got, err := framework.Metric(s.Config, "mount_unbound_gc_listing_failures_total"); err != nil || got < 3 {
		t.Errorf("failed listings counted: %d %v, want at least 3", got, err)
	}

	// A listing without any binding deletes nothing (more likely wrong than true).
	standIn.set(0)
	waitListings(3)
	checkAll("no binding at all", map[string]bool{"ws-c": true})
}
