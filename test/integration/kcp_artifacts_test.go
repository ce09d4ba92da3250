package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/kcp-dev/mount-apiserver/pkg/kcp/export"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

func kcpArtifacts() string { return filepath.Join(framework.RepoRoot(), "artifacts", "kcp") }

// shape is what a schema says about a field that a client relies on: its type and format,
// the names and shapes of its fields, which are required, the enum values, and how lists
// merge. Descriptions and defaults are left out.
type shape struct {
	Type        string            `json:"type,omitempty"`
	Format      string            `json:"format,omitempty"`
	Required    []string          `json:"required,omitempty"`
	Enum        []string          `json:"enum,omitempty"`
	ListType    string            `json:"listType,omitempty"`
	ListMapKeys []string          `json:"listMapKeys,omitempty"`
	Properties  map[string]*shape `json:"properties,omitempty"`
	Items       *shape            `json:"items,omitempty"`
	Additional  *shape            `json:"additionalProperties,omitempty"`
}

// shapeOf reads a schema node as JSON decoded it. resolve looks up "$ref"s (the server's
// OpenAPI v3 refers to components, directly or as the only member of an allOf); the
// APIResourceSchema has none.
func shapeOf(node map[string]any, resolve func(ref string) (map[string]any, error), depth int) (*shape, error) {
	if depth > 32 {
		return nil, fmt.Errorf("schema deeper than 32 levels")
	}
	ref, _ := node["$ref"].(string)
	if allOf, ok := node["allOf"].([]any); ok && len(allOf) == 1 {
		if m, ok := allOf[0].(map[string]any); ok {
			ref, _ = m["$ref"].(string)
		}
	}
	if ref != "" {
		target, err := resolve(ref)
		if err != nil {
			return nil, err
		}
		return shapeOf(target, resolve, depth+1)
	}
	s := &shape{}
	s.Type, _ = node["type"].(string)
	s.Format, _ = node["format"].(string)
	s.ListType, _ = node["x-kubernetes-list-type"].(string)
	for _, key := range []struct {
		name string
		into *[]string
	}{{"required", &s.Required}, {"enum", &s.Enum}, {"x-kubernetes-list-map-keys", &s.ListMapKeys}} {
		values, _ := node[key.name].([]any)
		for _, v := range values {
			raw, err := json.Marshal(v)
			if err != nil {
				return nil, err
			}
			*key.into = append(*key.into, string(raw))
		}
		sort.Strings(*key.into)
	}
	if props, ok := node["properties"].(map[string]any); ok {
		s.Properties = map[string]*shape{}
		for name, p := range props {
			m, ok := p.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("property %s: %T", name, p)
			}
			ps, err := shapeOf(m, resolve, depth+1)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			s.Properties[name] = ps
		}
	}
	if items, ok := node["items"].(map[string]any); ok {
		is, err := shapeOf(items, resolve, depth+1)
		if err != nil {
			return nil, fmt.Errorf("items: %w", err)
		}
		s.Items = is
	}
	if ap, ok := node["additionalProperties"].(map[string]any); ok {
		as, err := shapeOf(ap, resolve, depth+1)
		if err != nil {
			return nil, fmt.Errorf("additionalProperties: %w", err)
		}
		s.Additional = as
	}
	return s, nil
}

func getJSON(t *testing.T, cfg *rest.Config, url, accept string, into any) {
	t.Helper()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", accept)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, body)
	}
	if err := json.Unmarshal(body, into); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestKcpSchemaMatchesServedOpenAPI compares the APIResourceSchema of artifacts/kcp, which kcp
// publishes in consumer workspaces, with the OpenAPI the server serves for Mounts (at the
// plain path and below /clusters/<logical-cluster>/, as kcp's virtual storage forwards it):
// field names, types, formats, required fields, enums and list types at every depth of spec
// and status, and the top-level fields. A changed Mount type with a stale bundle fails here,
// as it fails hack/verify-codegen.sh. The printer columns are the server's table columns.
func TestKcpSchemaMatchesServedOpenAPI(t *testing.T) {
	s := framework.StartInProcess(t, "", kcpAPIOnly)

	data, err := os.ReadFile(filepath.Join(kcpArtifacts(), export.SchemaFile))
	if err != nil {
		t.Fatal(err)
	}
	var ars struct {
		Spec struct {
			Names struct {
				ShortNames []string `json:"shortNames"`
				Categories []string `json:"categories"`
			} `json:"names"`
			Versions []struct {
				Name                     string         `json:"name"`
				Schema                   map[string]any `json:"schema"`
				AdditionalPrinterColumns []struct {
					Name string `json:"name"`
				} `json:"additionalPrinterColumns"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &ars); err != nil {
		t.Fatal(err)
	}
	if len(ars.Spec.Versions) != 1 || ars.Spec.Versions[0].Name != "v1alpha1" {
		t.Fatalf("versions of the APIResourceSchema: %+v", ars.Spec.Versions)
	}
	noRefs := func(ref string) (map[string]any, error) {
		return nil, fmt.Errorf("$ref %s in the APIResourceSchema", ref)
	}
	want, err := shapeOf(ars.Spec.Versions[0].Schema, noRefs, 0)
	if err != nil {
		t.Fatal(err)
	}

	for _, prefix := range []string{"", "/clusters/ws-a"} {
		var doc struct {
			Components struct {
				Schemas map[string]map[string]any `json:"schemas"`
			} `json:"components"`
		}
		where := prefix + "/openapi/v3/apis/mounts.kcp.io/v1alpha1"
		getJSON(t, s.Config, s.URL+where, "application/json", &doc)
		resolve := func(ref string) (map[string]any, error) {
			name, ok := strings.CutPrefix(ref, "#/components/schemas/")
			if !ok || doc.Components.Schemas[name] == nil {
				return nil, fmt.Errorf("unresolvable $ref %q", ref)
			}
			return doc.Components.Schemas[name], nil
		}
		mount := doc.Components.Schemas["io.kcp.mounts.v1alpha1.Mount"]
		if mount == nil {
			t.Fatalf("%s: no Mount schema in %v", where, slices.Sorted(maps.Keys(doc.Components.Schemas)))
		}
		got, err := shapeOf(mount, resolve, 0)
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		// metadata is reduced to `type: object` in the APIResourceSchema, as in CRDs; the
		// server's ObjectMeta is compared only by its presence.
		if m := want.Properties["metadata"]; m == nil || m.Type != "object" || m.Properties != nil {
			t.Errorf("metadata in the APIResourceSchema: %+v, want type: object only", m)
		}
		if got.Properties["metadata"] == nil {
			t.Errorf("%s: the served Mount has no metadata", where)
		}
		got.Properties["metadata"] = want.Properties["metadata"]
		if diff := cmp.Diff(got, want); diff != "" {
			t.Errorf("%s: the APIResourceSchema differs from the served OpenAPI of Mount (-served +artifacts/kcp); run hack/update-codegen.sh:\n%s", where, diff)
		}
		// Every depth was compared: the deepest field the types have today is there.
		if c := got.Properties["status"].Properties["conditions"]; c == nil || c.Items == nil || c.Items.Properties["lastTransitionTime"].Format != "date-time" {
			t.Errorf("%s: status.conditions[].lastTransitionTime not compared: %+v", where, c)
		}
	}

	// kcp serves discovery with the schema's names: they must be the server's own, or
	// kubectl get mnt works against the server and fails through kcp.
	var discovery metav1.APIResourceList
	getJSON(t, s.Config, s.URL+"/apis/mounts.kcp.io/v1alpha1", "application/json", &discovery)
	for _, r := range discovery.APIResources {
		if r.Name == "mounts" && (!slices.Equal(r.ShortNames, ars.Spec.Names.ShortNames) || !slices.Equal(r.Categories, ars.Spec.Names.Categories)) {
			t.Errorf("the APIResourceSchema's short names %v and categories %v, the server's %v and %v", ars.Spec.Names.ShortNames, ars.Spec.Names.Categories, r.ShortNames, r.Categories)
		}
	}

	var table metav1.Table
	getJSON(t, s.Config, s.URL+"/apis/mounts.kcp.io/v1alpha1/mounts", "application/json;as=Table;v=v1;g=meta.k8s.io", &table)
	var served, printed []string
	for _, c := range table.ColumnDefinitions[1:] { // Name is implicit in printer columns
		served = append(served, c.Name)
	}
	for _, c := range ars.Spec.Versions[0].AdditionalPrinterColumns {
		printed = append(printed, c.Name)
	}
	if !slices.Equal(served, printed) {
		t.Errorf("printer columns %v, the server's table has %v", printed, served)
	}
}

// TestKcpArtifactsKustomize builds every rendering of the kcp bundle with the real kubectl
// (artifacts/kcp for kcp v0.32.3, artifacts/kcp-main for kcp main, and the consumer, parent
// and target kustomizations) and decodes the output strictly: kcp's kinds of v0.32.3 with the
// kcp SDK's types, kcp main's renamed cache kinds (which the SDK v0.29.0 lacks) with this
// test's own structs, RBAC with rbac/v1. What kubectl apply -k would send is what the checks
// hold the bundle to, including the rights real kcp needs: "access" in every role.
func TestKcpArtifactsKustomize(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is required on PATH: %v", err)
	}
	render := func(dir string) []byte {
		t.Helper()
		out, err := exec.Command(kubectl, "kustomize", dir).Output()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		return out
	}
	build := func(dir string) *export.Bundle {
		t.Helper()
		b, err := export.Decode(render(dir))
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		return b
	}
	grantsAccess := func(where string, r *rbacv1.ClusterRole) {
		t.Helper()
		for _, rule := range r.Rules {
			if slices.Contains(rule.NonResourceURLs, "/") && slices.Contains(rule.Verbs, "access") {
				return
			}
		}
		t.Errorf("%s: ClusterRole %s does not grant kcp's \"access\" to its workspace", where, r.Name)
	}
	allows := func(r *rbacv1.ClusterRole, group, resource, verb string) bool {
		for _, rule := range r.Rules {
			if slices.Contains(rule.APIGroups, group) && slices.Contains(rule.Resources, resource) && slices.Contains(rule.Verbs, verb) {
				return true
			}
		}
		return false
	}
	boundTo := func(b *export.Bundle, role, user string) bool {
		for _, crb := range export.All[*rbacv1.ClusterRoleBinding](b) {
			if crb.RoleRef.Name == role && slices.ContainsFunc(crb.Subjects, func(s rbacv1.Subject) bool { return s.Kind == rbacv1.UserKind && s.Name == user }) {
				return true
			}
		}
		return false
	}

	provider := build(kcpArtifacts())
	if err := export.CheckProvider(provider); err != nil {
		t.Errorf("kubectl kustomize artifacts/kcp: %v", err)
	}
	if n := len(provider.Objects); n != 8 {
		t.Errorf("artifacts/kcp: %d objects, want 8 (schema, 2 exports, cached resource, slice, 2 roles, 1 binding)", n)
	}
	for _, r := range export.All[*rbacv1.ClusterRole](provider) {
		grantsAccess("artifacts/kcp", r)
	}
	if r := export.Find[*rbacv1.ClusterRole](provider, "mount-apiserver"); r == nil || !allows(r, "apis.kcp.io", "apiexports", "get") || !allows(r, "apis.kcp.io", "apiexports/content", "list") || !allows(r, "apis.kcp.io", "apibindings", "list") || !boundTo(provider, "mount-apiserver", "mount-apiserver") {
		t.Errorf("artifacts/kcp: the provider identity's role lacks what kcp checks in the export's virtual workspace: %+v", r)
	}

	// kcp main: the same bundle with the renamed cache kinds.
	type ref struct {
		Name string `json:"name"`
	}
	type clusterCachedResource struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
		Spec       struct {
			Group         string                `json:"group"`
			Version       string                `json:"version"`
			Resource      string                `json:"resource"`
			LabelSelector *metav1.LabelSelector `json:"labelSelector"`
		} `json:"spec"`
	}
	type clusterCachedSlice struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
		Spec       struct {
			ClusterCachedResource ref `json:"clusterCachedResource"`
			Export                ref `json:"export"`
			Shards                struct {
				MatchAll bool `json:"matchAll"`
			} `json:"shards"`
		} `json:"spec"`
	}
	var rest [][]byte
	var anchor *clusterCachedResource
	var slice *clusterCachedSlice
	for i, doc := range strings.Split(string(render(filepath.Join(framework.RepoRoot(), "artifacts", "kcp-main"))), "\n---\n") {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("artifacts/kcp-main document %d: %v", i, err)
		}
		var into any
		switch head.Kind {
		case "ClusterCachedResource":
			anchor = &clusterCachedResource{}
			into = anchor
		case "ClusterCachedResourceEndpointSlice":
			slice = &clusterCachedSlice{}
			into = slice
		case "CachedResource", "CachedResourceEndpointSlice":
			t.Errorf("artifacts/kcp-main has v0.32.3's kind %s, which kcp main does not serve", head.Kind)
			continue
		default:
			rest = append(rest, []byte(doc))
			continue
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Errorf("artifacts/kcp-main %s: %v", head.Kind, err)
		}
	}
	mainBundle, err := export.Decode(bytes.Join(rest, []byte("\n---\n")))
	if err != nil {
		t.Fatalf("artifacts/kcp-main: %v", err)
	}
	for _, e := range export.All[*apisv1alpha2.APIExport](mainBundle) {
		v := e.Spec.Resources[0].Storage.Virtual
		if v == nil || v.Reference.Kind != "ClusterCachedResourceEndpointSlice" || v.Reference.Name != export.EndpointSliceName {
			t.Errorf("artifacts/kcp-main: APIExport %s's virtual storage references %+v", e.Name, v)
		}
	}
	if n := len(export.All[*apisv1alpha1.APIResourceSchema](mainBundle)); n != 1 {
		t.Errorf("artifacts/kcp-main: %d APIResourceSchemas", n)
	}
	if anchor == nil || anchor.Metadata.Name != export.CachedResourceName || anchor.Metadata.Annotations["cachedresources.cache.kcp.io/skip-endpointslice"] != "true" {
		t.Errorf("artifacts/kcp-main: ClusterCachedResource %+v", anchor)
	}
	if slice == nil || slice.Metadata.Name != export.EndpointSliceName || slice.Spec.ClusterCachedResource.Name != export.CachedResourceName || slice.Spec.Export.Name != export.EndpointsExportName || !slice.Spec.Shards.MatchAll {
		t.Errorf("artifacts/kcp-main: ClusterCachedResourceEndpointSlice %+v", slice)
	}

	consumer := build(filepath.Join(kcpArtifacts(), "consumer"))
	var roles []string
	for _, r := range export.All[*rbacv1.ClusterRole](consumer) {
		roles = append(roles, r.Name)
		grantsAccess("artifacts/kcp/consumer", r)
		if r.Labels["app.kubernetes.io/part-of"] != "mount-apiserver" {
			t.Errorf("ClusterRole %s: labels %v, kustomize's label missing", r.Name, r.Labels)
		}
	}
	if want := []string{"mount-apiserver-reviewer", "mounts-admin", "mounts-edit", "mounts-view"}; !slices.Equal(slices.Sorted(slices.Values(roles)), want) {
		t.Errorf("consumer roles %v, want %v", roles, want)
	}
	if r := export.Find[*rbacv1.ClusterRole](consumer, "mount-apiserver-reviewer"); r == nil || !allows(r, "authorization.k8s.io", "subjectaccessreviews", "create") || !boundTo(consumer, r.Name, "mount-apiserver") {
		t.Errorf("consumer: the provider identity cannot review access: %+v", r)
	}
	parent := build(filepath.Join(kcpArtifacts(), "parent"))
	if r := export.Find[*rbacv1.ClusterRole](parent, "mount-apiserver-workspace-reader"); r == nil || !allows(r, "tenancy.kcp.io", "workspaces", "get") || !boundTo(parent, r.Name, "mount-apiserver") {
		t.Errorf("parent: the provider identity cannot read Workspaces: %+v", r)
	} else {
		grantsAccess("artifacts/kcp/parent", r)
	}
	target := build(filepath.Join(kcpArtifacts(), "target"))
	for _, r := range export.All[*rbacv1.ClusterRole](target) {
		grantsAccess("artifacts/kcp/target", r)
	}
	if r := export.Find[*rbacv1.ClusterRole](target, "mount-apiserver-impersonator"); r == nil || !allows(r, "", "users", "impersonate") || !boundTo(target, r.Name, "mount-apiserver") {
		t.Errorf("target: the provider identity cannot impersonate: %+v", r)
	}
}
