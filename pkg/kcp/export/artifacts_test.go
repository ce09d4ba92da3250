package export

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"

	"github.com/kcp-dev/mount-apiserver/pkg/generated/openapi"
)

const bundleDir = "../../../artifacts/kcp"

func readBundle(t *testing.T, dir string) *Bundle {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Decode(data); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		all = append(append(all, data...), "\n---\n"...)
	}
	b, err := Decode(all)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGeneratedFilesAreUpToDate fails when the Mount types (their OpenAPI) changed and
// hack/update-codegen.sh was not run since.
func TestGeneratedFilesAreUpToDate(t *testing.T) {
	files, err := Files(openapi.GetOpenAPIDefinitions)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		onDisk, err := os.ReadFile(filepath.Join(bundleDir, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(onDisk, f.Data) {
			t.Errorf("artifacts/kcp/%s is stale: run hack/update-codegen.sh", f.Name)
		}
	}
}

// TestBundle decodes every YAML of artifacts/kcp strictly and checks that the objects fit.
func TestBundle(t *testing.T) {
	provider := readBundle(t, bundleDir)
	if err := CheckProvider(provider); err != nil {
		t.Errorf("artifacts/kcp: %v", err)
	}

	examples := readBundle(t, filepath.Join(bundleDir, "examples"))
	bindings := All[*apisv1alpha2.APIBinding](examples)
	if len(bindings) != 1 {
		t.Fatalf("examples: want one APIBinding, found %d", len(bindings))
	}
	if err := CheckBinding(bindings[0]); err != nil {
		t.Errorf("examples: %v", err)
	}
	// The binding accepts what the export claims, no more.
	export := Find[*apisv1alpha2.APIExport](provider, ExportName)
	if export == nil || len(export.Spec.PermissionClaims) != 1 || !slices.Equal(export.Spec.PermissionClaims[0].Verbs, bindings[0].Spec.PermissionClaims[0].Verbs) {
		t.Errorf("the binding's claim %+v does not match the export's", bindings[0].Spec.PermissionClaims)
	}

	consumer := readBundle(t, filepath.Join(bundleDir, "consumer"))
	allows := func(role, resource, verb string) bool {
		r := Find[*rbacv1.ClusterRole](consumer, role)
		if r == nil {
			t.Fatalf("consumer: no ClusterRole %q", role)
		}
		for _, rule := range r.Rules {
			if slices.Contains(rule.APIGroups, Group) && slices.Contains(rule.Resources, resource) && slices.Contains(rule.Verbs, verb) {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		role, resource, verb string
		want                 bool
	}{
		{"mounts-view", "mounts", "watch", true},
		{"mounts-view", "mounts/status", "get", true},
		{"mounts-view", "mounts/proxy", "get", false}, // the proxy lends credentials
		{"mounts-view", "mounts", "create", false},
		{"mounts-edit", "mounts", "delete", true},
		{"mounts-edit", "mounts/proxy", "get", true}, // kcp authorizes the proxy as get
		{"mounts-edit", "mounts/proxy", "create", true},
		{"mounts-edit", "mounts", "lend", false},
		{"mounts-edit", "mounts/status", "update", false},
		{"mounts-admin", "mounts", "lend", true},
		{"mounts-admin", "mounts/status", "patch", true},
		{"mounts-admin", "mounts/proxy", "create", true},
	} {
		if got := allows(tc.role, tc.resource, tc.verb); got != tc.want {
			t.Errorf("%s allows %s on %s: %v, want %v", tc.role, tc.verb, tc.resource, got, tc.want)
		}
	}
	if r := Find[*rbacv1.ClusterRole](consumer, "mounts-admin"); r != nil && len(r.Labels) > 0 {
		t.Errorf("mounts-admin grants lend; it must not aggregate into a built-in role: %v", r.Labels)
	}
}

// TestDecodeIsStrict: what kcp or kubectl would refuse, Decode refuses.
func TestDecodeIsStrict(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"unknown field", "apiVersion: apis.kcp.io/v1alpha2\nkind: APIExport\nmetadata: {name: x}\nspec: {resourcez: []}\n", `unknown field "spec.resourcez"`},
		{"duplicate field", "apiVersion: apis.kcp.io/v1alpha2\nkind: APIExport\nmetadata: {name: a}\nmetadata: {name: b}\n", `key "metadata" already set`},
		{"unknown kind", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", "no kind"},
		{"unknown schema field", "apiVersion: apis.kcp.io/v1alpha1\nkind: APIResourceSchema\nmetadata: {name: x}\nspec: {group: g, names: {plural: p, kind: K}, scope: Cluster, versions: [{name: v1, served: true, storage: true, schema: {type: object, propertiez: {}}}]}\n", `unknown field "propertiez"`},
		{"unknown field in slice export", "apiVersion: cache.kcp.io/v1alpha1\nkind: CachedResourceEndpointSlice\nmetadata: {name: x}\nspec: {cachedResource: {name: a}, export: {name: e, nam: f}}\n", `spec.export: json: unknown field "nam"`},
		{"unknown field in slice", "apiVersion: cache.kcp.io/v1alpha1\nkind: CachedResourceEndpointSlice\nmetadata: {name: x}\nspec: {cachedResource: {name: a}, exports: {name: e}}\n", `unknown field "spec.exports"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := Decode([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestCheckProviderCatchesMismatches: a stale schema reference, an export bound to the wrong
// slice and a slice naming the bound export are each reported.
func TestCheckProviderCatchesMismatches(t *testing.T) {
	good, err := os.ReadFile(filepath.Join(bundleDir, ExportFile))
	if err != nil {
		t.Fatal(err)
	}
	rest := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(bundleDir, name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	b, err := Decode(bytes.Join([][]byte{rest(SchemaFile), good, rest("cachedresource.yaml"), rest("rbac.yaml")}, []byte("\n---\n")))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckProvider(b); err != nil {
		t.Fatalf("the bundle as it is: %v", err)
	}
	schema := All[*apisv1alpha1.APIResourceSchema](b)[0]

	export := Find[*apisv1alpha2.APIExport](b, ExportName)
	export.Spec.Resources[0].Schema = "v0000000000.mounts.mounts.kcp.io"
	export.Spec.Resources[0].Storage.Virtual.Reference.Name = "other"
	b.SliceExports[EndpointSliceName] = apisv1alpha2.ExportBindingReference{Name: ExportName}
	schema.Spec.Versions[0].Served = false
	err = CheckProvider(b)
	for _, want := range []string{
		`references schema "v0000000000.mounts.mounts.kcp.io"`,
		`CachedResourceEndpointSlice "other"`,
		`want the never-bound APIExport "mount-apiserver-endpoints"`,
		"regenerate with hack/update-codegen.sh",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want one containing %q", err, want)
		}
	}
}

// TestTargetBundle: the RBAC for Workspace mounts' target workspaces lets the server's kcp
// identity impersonate users, groups, UIDs and extras (integration tests apply it).
func TestTargetBundle(t *testing.T) {
	target := readBundle(t, filepath.Join(bundleDir, "target"))
	role := Find[*rbacv1.ClusterRole](target, "mount-apiserver-impersonator")
	if role == nil {
		t.Fatal("target: no ClusterRole mount-apiserver-impersonator")
	}
	var users, extras bool
	for _, r := range role.Rules {
		users = users || slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "users") && slices.Contains(r.Resources, "groups") && slices.Contains(r.Verbs, "impersonate")
		extras = extras || slices.Contains(r.APIGroups, "authentication.k8s.io") && slices.Contains(r.Resources, "*") && slices.Contains(r.Verbs, "impersonate")
	}
	if !users || !extras {
		t.Errorf("target role rules %+v: want impersonate on users, groups and authentication.k8s.io/*", role.Rules)
	}
}
