package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	applyv1alpha1 "github.com/kcp-dev/mount-apiserver/pkg/generated/applyconfiguration/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

func urlMount(name string) *v1alpha1.Mount {
	return &v1alpha1.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.MountSpec{
			Ref: v1alpha1.ObjectReference{Namespace: "clusters", Name: name + "-kubeconfig"},
		},
	}
}

func workspaceMount(name, path string) *v1alpha1.Mount {
	return &v1alpha1.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.MountSpec{Type: v1alpha1.MountTypeWorkspace, Ref: v1alpha1.ObjectReference{Name: path}},
	}
}

func TestMountLifecycle(t *testing.T) {
	s := framework.StartInProcess(t, "", apiOnly)
	ctx := context.Background()
	mounts := s.Client.MountsV1alpha1().Mounts()

	// Watch from the start so every event below is observed.
	w, err := mounts.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	created, err := mounts.Create(ctx, urlMount("prod"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Spec.Type != v1alpha1.MountTypeURL || created.Spec.Ref.Kind != "Secret" || created.Spec.Ref.APIVersion != "v1" ||
		created.Spec.Identity.Mode != v1alpha1.IdentityModeImpersonate {
		t.Errorf("defaults not applied: %+v", created.Spec)
	}
	if created.Generation != 1 {
		t.Errorf("generation = %d, want 1", created.Generation)
	}
	if _, err := mounts.Create(ctx, workspaceMount("team-a", "root:org:team-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := mounts.Create(ctx, urlMount("prod"), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: got %v, want AlreadyExists", err)
	}

	// Status: the subresource changes status only; spec changes sent through it are dropped.
	withStatus := created.DeepCopy()
	withStatus.Status.Phase = v1alpha1.MountPhaseReady
	withStatus.Status.URL = "https://127.0.0.1:6443/apis/mounts.kcp.io/v1alpha1/mounts/prod/proxy"
	withStatus.Status.ObservedGeneration = 1
	withStatus.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "TargetReachable", LastTransitionTime: metav1.Now()}}
	withStatus.Spec.Type = v1alpha1.MountTypeRedirect
	updated, err := mounts.UpdateStatus(ctx, withStatus, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if updated.Status.Phase != v1alpha1.MountPhaseReady || updated.Spec.Type != v1alpha1.MountTypeURL {
		t.Errorf("status update: phase %q, type %q", updated.Status.Phase, updated.Spec.Type)
	}

	// The main resource ignores status and bumps the generation on spec changes.
	updated.Spec.Timeouts = &v1alpha1.MountTimeouts{ConnectSeconds: ptr.To[int32](5)}
	updated.Status.Phase = v1alpha1.MountPhaseUnknown
	updated, err = mounts.Update(ctx, updated, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if updated.Generation != 2 || updated.Status.Phase != v1alpha1.MountPhaseReady {
		t.Errorf("spec update: generation %d, phase %q", updated.Generation, updated.Status.Phase)
	}

	// Field selectors on spec.type and status.phase.
	for selector, want := range map[string]string{
		"spec.type=URL":        "prod",
		"spec.type=Workspace":  "team-a",
		"status.phase=Ready":   "prod",
		"status.phase!=Ready":  "team-a",
		"metadata.name=team-a": "team-a",
		"spec.type=Redirect":   "",
	} {
		list, err := mounts.List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			t.Fatalf("%s: %v", selector, err)
		}
		var names []string
		for _, m := range list.Items {
			names = append(names, m.Name)
		}
		if strings.Join(names, ",") != want {
			t.Errorf("%s: got %v, want %q", selector, names, want)
		}
	}
	if _, err := mounts.List(ctx, metav1.ListOptions{FieldSelector: "spec.ref.name=x"}); !apierrors.IsBadRequest(err) {
		t.Errorf("unsupported field selector: got %v, want BadRequest", err)
	}

	// Patch.
	patched, err := mounts.Patch(ctx, "team-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"a"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if patched.Labels["team"] != "a" {
		t.Errorf("patch lost: %v", patched.Labels)
	}

	if err := mounts.Delete(ctx, "prod", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := mounts.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "team=a"}); err != nil {
		t.Fatal(err)
	}
	if list, err := mounts.List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
		t.Errorf("after deletes: %v items, err %v", len(list.Items), err)
	}

	// The watch saw every change, in order.
	want := []string{"ADDED prod", "ADDED team-a", "MODIFIED prod", "MODIFIED prod", "MODIFIED team-a", "DELETED prod", "DELETED team-a"}
	var got []string
	timeout := time.After(30 * time.Second)
	for len(got) < len(want) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed early; got %v", got)
			}
			if ev.Type == watch.Error {
				t.Fatalf("watch error: %v", ev.Object)
			}
			got = append(got, string(ev.Type)+" "+ev.Object.(*v1alpha1.Mount).Name)
		case <-timeout:
			t.Fatalf("watch events: got %v, want %v", got, want)
		}
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("watch events:\n got %v\nwant %v", got, want)
	}
}

func TestServerSideApply(t *testing.T) {
	s := framework.StartInProcess(t, "", apiOnly)
	ctx := context.Background()
	mounts := s.Client.MountsV1alpha1().Mounts()

	apply := applyv1alpha1.Mount("prod").WithSpec(applyv1alpha1.MountSpec().
		WithRef(applyv1alpha1.ObjectReference().WithNamespace("clusters").WithName("prod")).
		WithIdentity(applyv1alpha1.MountIdentity().WithUserPrefix("hub:")))
	m, err := mounts.Apply(ctx, apply, metav1.ApplyOptions{FieldManager: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Spec.Identity.UserPrefix != "hub:" || m.Spec.Ref.Kind != "Secret" {
		t.Errorf("applied spec: %+v", m.Spec)
	}

	// A second manager that sets the same field conflicts; forcing takes ownership.
	other := applyv1alpha1.Mount("prod").WithSpec(applyv1alpha1.MountSpec().
		WithRef(applyv1alpha1.ObjectReference().WithNamespace("clusters").WithName("prod")).
		WithIdentity(applyv1alpha1.MountIdentity().WithUserPrefix("other:")))
	if _, err := mounts.Apply(ctx, other, metav1.ApplyOptions{FieldManager: "bob"}); !apierrors.IsConflict(err) {
		t.Fatalf("conflicting apply: got %v, want Conflict", err)
	}
	if m, err = mounts.Apply(ctx, other, metav1.ApplyOptions{FieldManager: "bob", Force: true}); err != nil {
		t.Fatal(err)
	}
	if m.Spec.Identity.UserPrefix != "other:" {
		t.Errorf("forced apply not applied: %q", m.Spec.Identity.UserPrefix)
	}

	// Status through apply on the subresource; spec in a status apply is reset, not applied.
	status := applyv1alpha1.Mount("prod").WithStatus(applyv1alpha1.MountStatus().WithPhase(v1alpha1.MountPhaseConnecting))
	if m, err = mounts.ApplyStatus(ctx, status, metav1.ApplyOptions{FieldManager: "controller"}); err != nil {
		t.Fatal(err)
	}
	if m.Status.Phase != v1alpha1.MountPhaseConnecting {
		t.Errorf("status apply: phase %q", m.Status.Phase)
	}
	managers := map[string]bool{}
	for _, f := range m.ManagedFields {
		managers[f.Manager+"/"+f.Subresource] = true
	}
	for _, want := range []string{"alice/", "bob/", "controller/status"} {
		if !managers[want] {
			t.Errorf("managedFields lack %s: %v", want, managers)
		}
	}
}

// TestTableRowsOmitManagedFields reads mounts as kubectl does, as a server-side Table whose rows
// carry each Mount's metadata: without managedFields, unless whole objects are asked for.
func TestTableRowsOmitManagedFields(t *testing.T) {
	s := framework.StartInProcess(t, "", apiOnly)
	ctx := context.Background()
	m := urlMount("prod")
	m.Labels = map[string]string{"env": "prod"}
	if _, err := s.Client.MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{FieldManager: "alice"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		includeObject     string
		wantManagedFields bool
	}{{"", false}, {"Metadata", false}, {"Object", true}} {
		req := s.Client.MountsV1alpha1().RESTClient().Get().Resource("mounts").
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
		if c.includeObject != "" {
			req = req.Param("includeObject", c.includeObject)
		}
		raw, err := req.DoRaw(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var table metav1.Table
		if err := json.Unmarshal(raw, &table); err != nil {
			t.Fatal(err)
		}
		if len(table.Rows) != 1 || len(table.Rows[0].Cells) == 0 || table.Rows[0].Cells[0] != "prod" {
			t.Fatalf("includeObject=%q: rows %+v", c.includeObject, table.Rows)
		}
		var obj metav1.PartialObjectMetadata
		if err := json.Unmarshal(table.Rows[0].Object.Raw, &obj); err != nil {
			t.Fatal(err)
		}
		if obj.Name != "prod" || obj.Labels["env"] != "prod" || obj.UID == "" {
			t.Errorf("includeObject=%q: row metadata %+v", c.includeObject, obj.ObjectMeta)
		}
		if got := len(obj.ManagedFields) > 0; got != c.wantManagedFields {
			t.Errorf("includeObject=%q: managedFields in the row: %v, want %v", c.includeObject, got, c.wantManagedFields)
		}
	}
}

func TestInvalidMountsAreRefusedWithFieldPaths(t *testing.T) {
	s := framework.StartInProcess(t, "", apiOnly)
	ctx := context.Background()
	mounts := s.Client.MountsV1alpha1().Mounts()

	bad := urlMount("bad")
	bad.Spec.Ref.Kind = "ConfigMap"
	bad.Spec.Identity.GroupPrefix = "system:"
	bad.Spec.Timeouts = &v1alpha1.MountTimeouts{RequestSeconds: ptr.To[int32](0)}
	_, err := mounts.Create(ctx, bad, metav1.CreateOptions{})
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != http.StatusUnprocessableEntity {
		t.Fatalf("got %v, want a 422", err)
	}
	fields := map[string]bool{}
	for _, c := range status.Status().Details.Causes {
		fields[c.Field] = true
	}
	for _, f := range []string{"spec.ref.kind", "spec.identity.groupPrefix", "spec.timeouts.requestSeconds"} {
		if !fields[f] {
			t.Errorf("422 lacks a cause for %s: %v", f, status.Status().Details.Causes)
		}
	}
	if !strings.Contains(err.Error(), `spec.ref.kind: Unsupported value: "ConfigMap"`) {
		t.Errorf("message does not name the field: %v", err)
	}

	// Status is validated too.
	good, err := mounts.Create(ctx, urlMount("good"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	good.Status.Phase = "Broken"
	good.Status.URL = "https://user:hunter2@example.test/"
	_, err = mounts.UpdateStatus(ctx, good, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.phase") || !strings.Contains(err.Error(), "status.URL") {
		t.Errorf("invalid status: got %v", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error echoes a credential: %v", err)
	}

	// Malformed JSON is a 400, not a panic or a 500.
	raw := s.Client.MountsV1alpha1().RESTClient().Post().Resource("mounts").Body([]byte(`{"apiVersion":"mounts.kcp.io/v1alpha1","kind":"Mount","spec":{"timeouts":{"connectSeconds":"ten"}}}`)).Do(ctx)
	var code int
	raw.StatusCode(&code)
	if code != http.StatusBadRequest {
		t.Errorf("malformed body: status %d, err %v", code, raw.Error())
	}
}

func TestHealthDiscoveryAndAuthentication(t *testing.T) {
	s := framework.StartInProcess(t, "", apiOnly)
	anonymous := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: caPool(t, s.Config)}}, Timeout: 10 * time.Second}

	for _, path := range []string{"/livez", "/readyz", "/healthz", "/version"} {
		if code, body := get(t, anonymous, s.Config.Host+path); code != http.StatusOK {
			t.Errorf("anonymous %s: %d %s", path, code, body)
		}
	}
	if code, body := get(t, anonymous, s.Config.Host+"/readyz?verbose"); code != http.StatusOK || !strings.Contains(body, "[+]etcd-readiness ok") {
		t.Errorf("readyz does not check etcd: %d %s", code, body)
	}
	for _, path := range []string{"/apis/mounts.kcp.io/v1alpha1/mounts", "/openapi/v2", "/metrics"} {
		if code, body := get(t, anonymous, s.Config.Host+path); code != http.StatusUnauthorized {
			t.Errorf("anonymous %s: %d %s, want 401", path, code, body)
		}
	}

	admin, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	code, body := get(t, admin, s.Config.Host+"/apis/mounts.kcp.io/v1alpha1")
	if code != http.StatusOK {
		t.Fatalf("discovery: %d %s", code, body)
	}
	var resources metav1.APIResourceList
	if err := json.Unmarshal([]byte(body), &resources); err != nil {
		t.Fatal(err)
	}
	found := map[string]metav1.APIResource{}
	for _, r := range resources.APIResources {
		found[r.Name] = r
	}
	if r := found["mounts"]; r.Namespaced || r.Kind != "Mount" || len(r.ShortNames) != 1 || r.ShortNames[0] != "mnt" {
		t.Errorf("mounts resource: %+v", r)
	}
	if _, ok := found["mounts/status"]; !ok {
		t.Errorf("mounts/status not served: %v", found)
	}

	for path, want := range map[string]string{
		"/openapi/v2": `"io.kcp.mounts.v1alpha1.MountSpec"`,
		"/openapi/v3/apis/mounts.kcp.io/v1alpha1": `"io.kcp.mounts.v1alpha1.MountSpec"`,
	} {
		code, body := get(t, admin, s.Config.Host+path)
		if code != http.StatusOK || !strings.Contains(body, want) || !strings.Contains(body, "x-kubernetes-group-version-kind") {
			t.Errorf("%s: %d, lacks %s", path, code, want)
		}
	}
}

func caPool(t *testing.T, cfg *rest.Config) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cfg.CAData) {
		t.Fatal("admin kubeconfig has no CA")
	}
	return pool
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
