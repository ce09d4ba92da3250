package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// clusterSecrets is a SecretSource of several logical clusters, reading the cluster from the
// context as kcp mode's Secret source does.
type clusterSecrets map[clusters.Name]secretMap

func (s clusterSecrets) GetSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	return s[clusters.From(ctx)].GetSecret(ctx, namespace, name)
}

// TestClustersNeverShareTargets: two logical clusters' Secrets of equal namespace, name and
// resourceVersion are different credentials, for different targets: mounts of the two
// clusters (of one name, too) get their own Target, probe result and metric series.
func TestClustersNeverShareTargets(t *testing.T) {
	srvA, caA, readyzA := startTarget(t, 0)
	srvB, caB, readyzB := startTarget(t, 0)
	secrets := clusterSecrets{"ws-a": secretMap{}, "ws-b": secretMap{}}
	secrets["ws-a"].add(t, "creds", srvA.URL, caA)
	secrets["ws-b"].add(t, "creds", srvB.URL, caB)
	reg := metrics.NewKubeRegistry()
	m := NewMetrics()
	m.Register(reg)
	p := &Proxier{Secrets: secrets, Transports: NewTransports(TransportOptions{}, m), Metrics: m, Probes: &ProbeCache{TTL: time.Hour}}
	inA := clusters.WithCluster(context.Background(), "ws-a")
	inB := clusters.WithCluster(context.Background(), "ws-b")

	mountA, mountB := testMount("same", "creds"), testMount("same", "creds")
	mountB.UID = "uid-same-in-b"
	targetA, err := p.Target(inA, mountA)
	if err != nil {
		t.Fatal(err)
	}
	targetB, err := p.Target(inB, mountB)
	if err != nil {
		t.Fatal(err)
	}
	if targetA == targetB || targetA.Base.Host == targetB.Base.Host {
		t.Fatalf("the mounts of two clusters share a Target (%s, %s)", targetA.Base.Host, targetB.Base.Host)
	}
	for _, probe := range []struct {
		ctx context.Context
		m   *mounts.Mount
	}{{inA, mountA}, {inB, mountB}} {
		if r := p.Probe(probe.ctx, probe.m); r.CredentialsErr != nil || r.ReachErr != nil {
			t.Errorf("probe: %+v", r)
		}
	}
	if readyzA.Load() != 1 || readyzB.Load() != 1 {
		t.Errorf("probes: %d at ws-a's target, %d at ws-b's; want one each (no shared result)", readyzA.Load(), readyzB.Load())
	}

	// Each probe dialed once, counted under its own cluster's mount.
	if seriesOf(t, reg, "ws-a/same") == 0 || seriesOf(t, reg, "ws-b/same") == 0 {
		t.Fatalf("series: ws-a/same %d, ws-b/same %d", seriesOf(t, reg, "ws-a/same"), seriesOf(t, reg, "ws-b/same"))
	}
	p.Forget("ws-a", "same", mountA.UID)
	if seriesOf(t, reg, "ws-a/same") != 0 || seriesOf(t, reg, "ws-b/same") == 0 {
		t.Errorf("after ws-a's mount was deleted: series ws-a/same %d, ws-b/same %d", seriesOf(t, reg, "ws-a/same"), seriesOf(t, reg, "ws-b/same"))
	}
	if MountLabel(clusters.DefaultCluster, "same") != "same" {
		t.Errorf("the default cluster's label is %q, want the plain name", MountLabel(clusters.DefaultCluster, "same"))
	}
}

// TestMetricsWithoutMounts (--metrics-per-mount=false): the mounts' series are one, with an
// empty mount label, whatever the number of mounts, and a deleted mount leaves them alone
// (they are every mount's).
func TestMetricsWithoutMounts(t *testing.T) {
	srv, ca, _ := startTarget(t, 0)
	secrets := secretMap{}
	secrets.add(t, "creds", srv.URL, ca)
	reg := metrics.NewKubeRegistry()
	m := NewMetrics()
	m.Register(reg)
	p := &Proxier{Secrets: secrets, Transports: NewTransports(TransportOptions{}, m), Metrics: m, Probes: &ProbeCache{TTL: time.Hour}, MetricsWithoutMounts: true}
	a, b := testMount("a", "creds"), testMount("b", "creds")
	b.UID = "uid-b"
	for _, mount := range []*mounts.Mount{a, b} {
		if r := p.Probe(context.Background(), mount); r.CredentialsErr != nil || r.ReachErr != nil {
			t.Fatalf("probe of %s: %+v", mount.Name, r)
		}
		p.Transports.Forget(mount.UID) // its own connection for the next mount's probe
	}
	if n := seriesOf(t, reg, "a") + seriesOf(t, reg, "b"); n != 0 {
		t.Errorf("%d series labelled by mount", n)
	}
	if n := seriesOf(t, reg, ""); n != 1 {
		t.Fatalf("%d series without a mount, want upstream connections' one", n)
	}
	p.Forget(clusters.DefaultCluster, "a", a.UID)
	if n := seriesOf(t, reg, ""); n != 1 {
		t.Errorf("a deleted mount took the series of all mounts with it: %d left", n)
	}
}

// A Redirect mount's answers count under <cluster>/<name> as the mount's other series, so
// that its delete takes them (they were under the bare name, which Forget never deleted, and
// which two clusters' Redirect mounts of one name shared).
func TestRedirectSeriesAreTheClustersMounts(t *testing.T) {
	reg := metrics.NewKubeRegistry()
	m := NewMetrics()
	m.Register(reg)
	p := &Proxier{Metrics: m}
	mount := testMount("same", "")
	h := &redirect{proxier: p, mount: mount, location: &url.URL{Scheme: "https", Host: "kcp.example", Path: "/clusters/root:team"}, workspace: "root:team"}
	req := httptest.NewRequest(http.MethodGet, "/api", nil).WithContext(clusters.WithCluster(context.Background(), "ws-a"))
	h.ServeHTTP(httptest.NewRecorder(), req)
	if seriesOf(t, reg, "ws-a/same") == 0 || seriesOf(t, reg, "same") != 0 {
		t.Fatalf("series: ws-a/same %d, same %d", seriesOf(t, reg, "ws-a/same"), seriesOf(t, reg, "same"))
	}
	p.Forget("ws-a", "same", mount.UID)
	if n := seriesOf(t, reg, "ws-a/same"); n != 0 {
		t.Errorf("%d series of the deleted Redirect mount left", n)
	}
}
