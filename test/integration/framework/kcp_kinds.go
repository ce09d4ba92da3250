package framework

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
)

// kinds is kcp's part in objects of kcp's kinds (KcpOptions.Kinds): they are CRDs in each
// workspace's kube-apiserver, so that kubectl stores and reads them as in kcp, and the
// harness acts on them as kcp's controllers do:
//
//   - a Workspace becomes a workspace: spec.cluster (a new logical cluster name), spec.URL,
//     status.phase; its content is a new kube-apiserver (seconds), or, with spec.mount, the
//     Mount it references (see kcp_mounted.go; WorkspaceMounts applies). Each update of a
//     mounted Workspace is an event that reads its Mount again.
//   - an APIBinding to the mounts export binds its workspace (status.phase Bound, with the
//     binding window of KcpOptions.BindingDelay); creating one needs "bind" on the APIExport
//     in the export's workspace, checked at creation as kcp's admission does.
//   - the endpoint slice (CachedResourceEndpointSlice in v0.32.3,
//     ClusterCachedResourceEndpointSlice in kcp main) keeps its status.endpoints only while
//     it names an existing cached resource and an APIExport that references the slice and
//     has no bindings (else kcp's controller empties them); in v0.32.3 the URL used is the
//     one that starts with the shard's virtual-workspace URL (exactly one), in main any URL
//     with shards.matchAll. That URL becomes the virtual storage's endpoint, verified with
//     KcpOptions.VirtualWorkspaceCA.
//
// The CRDs keep unknown fields: the harness checks what kcp acts on, not the rest of each
// object (the artifacts tests decode the bundle strictly).
type kinds struct {
	mu    sync.Mutex
	kubes []*KubeAPIServer // started for new workspaces
	seen  map[string]string
}

var (
	workspacesGVR       = schema.GroupVersionResource{Group: "tenancy.kcp.io", Version: "v1alpha1", Resource: "workspaces"}
	apiBindingsGVR      = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apibindings"}
	apiExportsGVR       = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha2", Resource: "apiexports"}
	apiSchemasGVR       = schema.GroupVersionResource{Group: "apis.kcp.io", Version: "v1alpha1", Resource: "apiresourceschemas"}
	cachedResourcesGVR  = schema.GroupVersionResource{Group: "cache.kcp.io", Version: "v1alpha1", Resource: "cachedresources"}
	cachedSlicesGVR     = schema.GroupVersionResource{Group: "cache.kcp.io", Version: "v1alpha1", Resource: "cachedresourceendpointslices"}
	clusterCachedGVR    = schema.GroupVersionResource{Group: "cache.kcp.io", Version: "v1alpha1", Resource: "clustercachedresources"}
	clusterCachedSlices = schema.GroupVersionResource{Group: "cache.kcp.io", Version: "v1alpha1", Resource: "clustercachedresourceendpointslices"}
)

// kcpCRDs are kcp's kinds as the harness stores them: cache.kcp.io's as of version.
func kcpCRDs(version KcpVersion) []*apiextensionsv1.CustomResourceDefinition {
	open := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: ptr.To(true)}}
	crd := func(group, plural, kind string, shortNames []string, versions ...string) *apiextensionsv1.CustomResourceDefinition {
		c := &apiextensionsv1.CustomResourceDefinition{
			ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
			Spec: apiextensionsv1.CustomResourceDefinitionSpec{
				Group: group, Scope: apiextensionsv1.ClusterScoped,
				Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: strings.ToLower(kind), Kind: kind, ListKind: kind + "List", ShortNames: shortNames},
			},
		}
		for i, v := range versions {
			c.Spec.Versions = append(c.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{
				Name: v, Served: true, Storage: i == len(versions)-1, Schema: open,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			})
		}
		return c
	}
	crds := []*apiextensionsv1.CustomResourceDefinition{
		crd("tenancy.kcp.io", "workspaces", "Workspace", []string{"ws"}, "v1alpha1"),
		crd("apis.kcp.io", "apiresourceschemas", "APIResourceSchema", nil, "v1alpha1"),
		crd("apis.kcp.io", "apiexports", "APIExport", nil, "v1alpha1", "v1alpha2"),
		crd("apis.kcp.io", "apibindings", "APIBinding", nil, "v1alpha1", "v1alpha2"),
	}
	if version == KcpV0323 {
		return append(crds, crd("cache.kcp.io", "cachedresources", "CachedResource", nil, "v1alpha1"),
			crd("cache.kcp.io", "cachedresourceendpointslices", "CachedResourceEndpointSlice", nil, "v1alpha1"))
	}
	return append(crds, crd("cache.kcp.io", "clustercachedresources", "ClusterCachedResource", nil, "v1alpha1"),
		crd("cache.kcp.io", "clustercachedresourceendpointslices", "ClusterCachedResourceEndpointSlice", nil, "v1alpha1"))
}

// install creates kcp's kinds in kube and waits until they are served.
func (*kinds) install(ctx context.Context, version KcpVersion, kube *KubeAPIServer) error {
	client, err := apiextensionsclient.NewForConfig(kube.AdminConfig)
	if err != nil {
		return err
	}
	crds := kcpCRDs(version)
	for _, crd := range crds {
		if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("installing kcp's kind %s: %w", crd.Spec.Names.Kind, err)
		}
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, crd := range crds {
			got, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			established := false
			for _, c := range got.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					established = true
				}
			}
			if !established {
				return false, nil
			}
		}
		return true, nil
	})
}

func (ks *kinds) stopAll() {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for _, kube := range ks.kubes {
		kube.Stop()
	}
	ks.kubes = nil
}

// admit is kcp's admission of kcp's kinds: creating an APIBinding needs "bind" on the
// APIExport in the export's workspace (with "access" there).
func (ks *kinds) admit(w http.ResponseWriter, req *http.Request, k *Kcp, ws *KcpWorkspace, inner string, as KcpUser) bool {
	if req.Method != http.MethodPost || !strings.HasPrefix(inner, "/apis/apis.kcp.io/") || !strings.HasSuffix(inner, "/apibindings") {
		return true
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		kcpStatus(w, http.StatusBadRequest, "BadRequest", err.Error())
		return false
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	var binding struct {
		Spec struct {
			Reference struct {
				Export *struct{ Path, Name string } `json:"export"`
			} `json:"reference"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(body, &binding); err != nil || binding.Spec.Reference.Export == nil {
		kcpStatus(w, http.StatusUnprocessableEntity, "Invalid", "spec.reference.export is required")
		return false
	}
	ref := binding.Spec.Reference.Export
	path := ref.Path
	if path == "" {
		path = ws.Path
	}
	k.mu.Lock()
	export := k.workspaces[path]
	k.mu.Unlock()
	if export == nil || !k.allowed(req.Context(), export, as, authorizationv1.ResourceAttributes{Verb: "bind", Group: "apis.kcp.io", Resource: "apiexports", Name: ref.Name}) {
		kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("unable to create APIBinding: no permission to bind to export %s:%s", path, ref.Name))
		return false
	}
	return true
}

// exportedSchema returns the names of the APIResourceSchema that the mounts APIExport in
// kube names.
func (*kinds) exportedSchema(ctx context.Context, kube *KubeAPIServer) (*schemaNames, error) {
	client, err := dynamic.NewForConfig(kube.AdminConfig)
	if err != nil {
		return nil, err
	}
	export, err := client.Resource(apiExportsGVR).Get(ctx, KcpExportName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	resources, _, _ := unstructured.NestedSlice(export.Object, "spec", "resources")
	for _, r := range resources {
		m, _ := r.(map[string]any)
		if m["name"] != "mounts" || m["group"] != "mounts.kcp.io" {
			continue
		}
		name, _ := m["schema"].(string)
		s, err := client.Resource(apiSchemasGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("APIResourceSchema %q of the export: %w", name, err)
		}
		raw, _, _ := unstructured.NestedMap(s.Object, "spec", "names")
		data, _ := json.Marshal(raw)
		var names schemaNames
		return &names, json.Unmarshal(data, &names)
	}
	return nil, fmt.Errorf("APIExport %s exports no mounts.mounts.kcp.io", KcpExportName)
}

// runKinds acts on kcp's kinds until the harness stops.
func (k *Kcp) runKinds() {
	defer k.background.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-k.stop
		cancel()
	}()
	for {
		select {
		case <-k.stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
		k.kindsOnce(ctx)
	}
}

func (k *Kcp) contentWorkspaces() []*KcpWorkspace {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []*KcpWorkspace
	for key, ws := range k.workspaces {
		if key == ws.Cluster && ws.Kube != nil {
			out = append(out, ws)
		}
	}
	return out
}

func (k *Kcp) kindsOnce(ctx context.Context) {
	for _, ws := range k.contentWorkspaces() {
		client, err := dynamic.NewForConfig(ws.Kube.AdminConfig)
		if err != nil {
			continue
		}
		if _, err := client.Resource(apiExportsGVR).Get(ctx, KcpExportName, metav1.GetOptions{}); err == nil {
			// The export's virtual workspace is named by this workspace's logical cluster.
			k.mu.Lock()
			k.exportCluster = ws.Cluster
			k.mu.Unlock()
		}
		k.syncWorkspaces(ctx, ws, client)
		k.syncBindings(ctx, ws, client)
		k.syncSlice(ctx, ws, client)
	}
}

func newClusterName() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:10]
}

// syncWorkspaces makes workspaces of ws's Workspace objects and writes their state back.
func (k *Kcp) syncWorkspaces(ctx context.Context, parent *KcpWorkspace, client dynamic.Interface) {
	list, err := client.Resource(workspacesGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range list.Items {
		obj := &list.Items[i]
		path := parent.Path + ":" + obj.GetName()
		k.mu.Lock()
		ws := k.workspaces[path]
		k.mu.Unlock()
		if ws == nil {
			cluster := newClusterName()
			mountName, hasMount, _ := unstructured.NestedString(obj.Object, "spec", "mount", "ref", "name")
			if hasMount {
				k.AddMountedWorkspace(path, cluster, parent.Cluster, mountName)
			} else {
				ws = &KcpWorkspace{Path: path, Cluster: cluster, phase: "Initializing"}
				k.mu.Lock()
				k.workspaces[path], k.workspaces[cluster] = ws, ws
				k.mu.Unlock()
				k.background.Add(1)
				go k.startContent(ws)
			}
			k.kinds.mu.Lock()
			if k.kinds.seen == nil {
				k.kinds.seen = map[string]string{}
			}
			k.kinds.seen[path] = obj.GetResourceVersion()
			k.kinds.mu.Unlock()
			continue
		}
		// An update of a mounted Workspace is an event: its Mount is read again.
		k.kinds.mu.Lock()
		changed := k.kinds.seen[path] != obj.GetResourceVersion()
		k.kinds.mu.Unlock()
		if changed && ws.MountName != "" {
			k.reconcileMounted(ws)
		}
		k.mu.Lock()
		phase, cluster := ws.phase, ws.Cluster
		k.mu.Unlock()
		curCluster, _, _ := unstructured.NestedString(obj.Object, "spec", "cluster")
		curPhase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
		if curCluster != cluster {
			_ = unstructured.SetNestedField(obj.Object, cluster, "spec", "cluster")
			_ = unstructured.SetNestedField(obj.Object, k.URL+"/clusters/"+path, "spec", "URL")
			if updated, err := client.Resource(workspacesGVR).Update(ctx, obj, metav1.UpdateOptions{}); err == nil {
				obj = updated
			}
		}
		if curPhase != phase {
			_ = unstructured.SetNestedField(obj.Object, phase, "status", "phase")
			if updated, err := client.Resource(workspacesGVR).UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err == nil {
				obj = updated
			}
		}
		k.kinds.mu.Lock()
		k.kinds.seen[path] = obj.GetResourceVersion()
		k.kinds.mu.Unlock()
	}
}

// startContent starts the kube-apiserver of a new workspace.
func (k *Kcp) startContent(ws *KcpWorkspace) {
	defer k.background.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-k.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	kube, err := StartKubeAPIServer(ctx, filepath.Join(k.Dir, "workspace-"+ws.Cluster))
	if err != nil {
		k.t.Logf("kcp harness: workspace %s: %v", ws.Path, err)
		return
	}
	k.kinds.mu.Lock()
	k.kinds.kubes = append(k.kinds.kubes, kube)
	k.kinds.mu.Unlock()
	if err := k.bootstrap(ctx, kube); err != nil {
		k.t.Logf("kcp harness: workspace %s: %v", ws.Path, err)
		return
	}
	k.mu.Lock()
	ws.Kube, ws.phase = kube, "Ready"
	k.mu.Unlock()
}

// syncBindings binds ws where it has an APIBinding to the mounts export.
func (k *Kcp) syncBindings(ctx context.Context, ws *KcpWorkspace, client dynamic.Interface) {
	list, err := client.Resource(apiBindingsGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	bound := false
	for i := range list.Items {
		obj := &list.Items[i]
		name, _, _ := unstructured.NestedString(obj.Object, "spec", "reference", "export", "name")
		path, _, _ := unstructured.NestedString(obj.Object, "spec", "reference", "export", "path")
		if name != KcpExportName {
			continue
		}
		if path == "" {
			path = ws.Path
		}
		k.mu.Lock()
		export := k.workspaces[path]
		k.mu.Unlock()
		if export == nil || export.Kube == nil {
			continue
		}
		exports, err := dynamic.NewForConfig(export.Kube.AdminConfig)
		if err != nil {
			continue
		}
		if _, err := exports.Resource(apiExportsGVR).Get(ctx, KcpExportName, metav1.GetOptions{}); err != nil {
			continue
		}
		bound = true
		k.mu.Lock()
		k.exportCluster = export.Cluster
		if !ws.Bound {
			ws.Bound, ws.boundAt = true, time.Now()
		}
		k.mu.Unlock()
		if phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase"); phase != "Bound" {
			_ = unstructured.SetNestedField(obj.Object, "Bound", "status", "phase")
			_ = unstructured.SetNestedField(obj.Object, export.Cluster, "status", "apiExportClusterName")
			_ = unstructured.SetNestedSlice(obj.Object, []any{map[string]any{"group": "mounts.kcp.io", "resource": "mounts"}}, "status", "boundResources")
			_, _ = client.Resource(apiBindingsGVR).UpdateStatus(ctx, obj, metav1.UpdateOptions{})
		}
	}
	k.mu.Lock()
	if !bound && ws.Bound && !ws.boundAt.IsZero() {
		ws.Bound = false
	}
	k.mu.Unlock()
}

// syncSlice keeps the endpoint slice of ws as kcp's controller does, and makes its URL the
// virtual storage's endpoint.
func (k *Kcp) syncSlice(ctx context.Context, ws *KcpWorkspace, client dynamic.Interface) {
	slices, resources, resourceField := cachedSlicesGVR, cachedResourcesGVR, "cachedResource"
	sliceKind := "CachedResourceEndpointSlice"
	if k.Version != KcpV0323 {
		slices, resources, resourceField, sliceKind = clusterCachedSlices, clusterCachedGVR, "clusterCachedResource", "ClusterCachedResourceEndpointSlice"
	}
	slice, err := client.Resource(slices).Get(ctx, "mount-apiserver", metav1.GetOptions{})
	if err != nil {
		return
	}
	endpoints, _, _ := unstructured.NestedSlice(slice.Object, "status", "endpoints")
	if len(endpoints) == 0 {
		return
	}
	keep := func() error {
		resource, _, _ := unstructured.NestedString(slice.Object, "spec", resourceField, "name")
		if _, err := client.Resource(resources).Get(ctx, resource, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("spec.%s.name %q: %w", resourceField, resource, err)
		}
		exportName, _, _ := unstructured.NestedString(slice.Object, "spec", "export", "name")
		export, err := client.Resource(apiExportsGVR).Get(ctx, exportName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("spec.export.name %q: %w", exportName, err)
		}
		refs, _, _ := unstructured.NestedSlice(export.Object, "spec", "resources")
		references := false
		for _, r := range refs {
			m, _ := r.(map[string]any)
			kind, _, _ := unstructured.NestedString(m, "storage", "virtual", "reference", "kind")
			name, _, _ := unstructured.NestedString(m, "storage", "virtual", "reference", "name")
			references = references || kind == sliceKind && name == slice.GetName()
		}
		if !references {
			return fmt.Errorf("APIExport %q does not reference the slice", exportName)
		}
		if k.exportBound(ctx, ws, exportName) {
			return fmt.Errorf("APIExport %q has bindings: ambiguous URLs", exportName)
		}
		return nil
	}
	if err := keep(); err != nil {
		// kcp's controller removes the endpoints.
		unstructured.RemoveNestedField(slice.Object, "status", "endpoints")
		_, _ = client.Resource(slices).UpdateStatus(ctx, slice, metav1.UpdateOptions{})
		return
	}
	var matches []string
	matchAll, _, _ := unstructured.NestedBool(slice.Object, "spec", "shards", "matchAll")
	for _, e := range endpoints {
		m, _ := e.(map[string]any)
		u, _ := m["url"].(string)
		if k.Version != KcpV0323 && matchAll || strings.HasPrefix(u, k.URL) {
			matches = append(matches, u)
		}
	}
	if len(matches) != 1 {
		return
	}
	k.mu.Lock()
	current := k.mountURL
	k.mu.Unlock()
	if current != nil && current.String() == matches[0] || len(k.Options.VirtualWorkspaceCA) == 0 {
		return
	}
	if err := k.ServeMounts(matches[0], k.Options.VirtualWorkspaceCA); err != nil {
		k.t.Logf("kcp harness: endpoint %s: %v", matches[0], err)
	}
}

// exportBound reports whether any workspace binds export exportName of ws.
func (k *Kcp) exportBound(ctx context.Context, export *KcpWorkspace, exportName string) bool {
	for _, ws := range k.contentWorkspaces() {
		client, err := dynamic.NewForConfig(ws.Kube.AdminConfig)
		if err != nil {
			continue
		}
		list, err := client.Resource(apiBindingsGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, b := range list.Items {
			name, _, _ := unstructured.NestedString(b.Object, "spec", "reference", "export", "name")
			path, _, _ := unstructured.NestedString(b.Object, "spec", "reference", "export", "path")
			if name == exportName && (path == export.Path || path == "" && ws == export) {
				return true
			}
		}
	}
	return false
}
