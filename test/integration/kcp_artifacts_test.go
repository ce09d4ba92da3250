package integration

import (
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

// TestKcpArtifactsKustomize builds artifacts/kcp and artifacts/kcp/consumer with the real
// kubectl and decodes the output strictly with the kcp SDK's types and rbac/v1: what kubectl
// apply -k would send is what the checks hold the bundle to.
func TestKcpArtifactsKustomize(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is required on PATH: %v", err)
	}
	build := func(dir string) *export.Bundle {
		t.Helper()
		out, err := exec.Command(kubectl, "kustomize", dir).Output()
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		b, err := export.Decode(out)
		if err != nil {
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		return b
	}

	provider := build(kcpArtifacts())
	if err := export.CheckProvider(provider); err != nil {
		t.Errorf("kubectl kustomize artifacts/kcp: %v", err)
	}
	if n := len(provider.Objects); n != 7 {
		t.Errorf("artifacts/kcp: %d objects, want 7 (schema, 2 exports, cached resource, slice, 2 roles)", n)
	}
	consumer := build(filepath.Join(kcpArtifacts(), "consumer"))
	var roles []string
	for _, r := range export.All[*rbacv1.ClusterRole](consumer) {
		roles = append(roles, r.Name)
		if r.Labels["app.kubernetes.io/part-of"] != "mount-apiserver" {
			t.Errorf("ClusterRole %s: labels %v, kustomize's label missing", r.Name, r.Labels)
		}
	}
	if want := []string{"mounts-admin", "mounts-edit", "mounts-view"}; !slices.Equal(slices.Sorted(slices.Values(roles)), want) {
		t.Errorf("consumer roles %v, want %v", roles, want)
	}
}
