package export

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	apisv1alpha1 "github.com/kcp-dev/sdk/apis/apis/v1alpha1"
	apisv1alpha2 "github.com/kcp-dev/sdk/apis/apis/v1alpha2"
	cachev1alpha1 "github.com/kcp-dev/sdk/apis/cache/v1alpha1"
)

// Bundle holds the objects of artifacts/kcp (or some of its files), decoded strictly.
type Bundle struct {
	Objects []runtime.Object
	// SliceExports is spec.export of each CachedResourceEndpointSlice, by slice name. kcp
	// v0.32.3 reads it (DESIGN.md section 1); the SDK's types (v0.29.0) predate it, so
	// Decode takes it out before it decodes the rest of the slice strictly.
	SliceExports map[string]apisv1alpha2.ExportBindingReference
}

// newScheme knows the kinds the bundle may hold.
func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		apisv1alpha1.AddToScheme, apisv1alpha2.AddToScheme, cachev1alpha1.AddToScheme, rbacv1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	return scheme, nil
}

// Decode decodes a stream of YAML documents strictly: unknown and duplicate fields are
// errors, as are kinds other than kcp's apis and cache kinds and rbac/v1, and an
// APIResourceSchema whose schema has unknown fields.
func Decode(data []byte) (*Bundle, error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	b := &Bundle{SliceExports: map[string]apisv1alpha2.ExportBindingReference{}}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		var u unstructured.Unstructured
		if err := yaml.UnmarshalStrict(doc, &u.Object); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(u.Object) == 0 {
			continue // comments only
		}
		if u.GetKind() == "CachedResourceEndpointSlice" {
			if doc, err = b.takeSliceExport(&u); err != nil {
				return nil, fmt.Errorf("document %d (%s %s): %w", i, u.GetKind(), u.GetName(), err)
			}
		}
		obj, _, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d (%s %s): %w", i, u.GetKind(), u.GetName(), err)
		}
		if s, ok := obj.(*apisv1alpha1.APIResourceSchema); ok {
			if err := strictSchemas(s); err != nil {
				return nil, fmt.Errorf("document %d (%s %s): %w", i, u.GetKind(), u.GetName(), err)
			}
		}
		b.Objects = append(b.Objects, obj)
	}
	return b, nil
}

func (b *Bundle) takeSliceExport(u *unstructured.Unstructured) ([]byte, error) {
	export, found, err := unstructured.NestedMap(u.Object, "spec", "export")
	if err != nil {
		return nil, fmt.Errorf("spec.export: %w", err)
	}
	if found {
		raw, err := json.Marshal(export)
		if err != nil {
			return nil, fmt.Errorf("spec.export: %w", err)
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		var ref apisv1alpha2.ExportBindingReference
		if err := dec.Decode(&ref); err != nil {
			return nil, fmt.Errorf("spec.export: %w", err)
		}
		b.SliceExports[u.GetName()] = ref
		unstructured.RemoveNestedField(u.Object, "spec", "export")
	}
	return json.Marshal(u.Object)
}

// strictSchemas decodes each version's schema (a raw extension, which the typed decode does
// not look into) with unknown fields refused.
func strictSchemas(s *apisv1alpha1.APIResourceSchema) error {
	for _, v := range s.Spec.Versions {
		dec := json.NewDecoder(bytes.NewReader(v.Schema.Raw))
		dec.DisallowUnknownFields()
		var props apiextensionsv1.JSONSchemaProps
		if err := dec.Decode(&props); err != nil {
			return fmt.Errorf("spec.versions[%s].schema: %w", v.Name, err)
		}
	}
	return nil
}

// Find returns the object of type T named name, or nil.
func Find[T interface {
	runtime.Object
	GetName() string
}](b *Bundle, name string) T {
	for _, obj := range b.Objects {
		if t, ok := obj.(T); ok && t.GetName() == name {
			return t
		}
	}
	var zero T
	return zero
}

// All returns the objects of type T.
func All[T runtime.Object](b *Bundle) []T {
	var out []T
	for _, obj := range b.Objects {
		if t, ok := obj.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// CheckProvider checks the objects of the provider workspace (artifacts/kcp) against each
// other and against the names this package gives them: one APIResourceSchema whose name is
// the hash of its content; the bound export and the endpoints export both serving it through
// the slice; the slice naming the CachedResource and the never-bound export; the claim on
// core Secrets; bind allowed on the bound export only.
func CheckProvider(b *Bundle) error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	schemas := All[*apisv1alpha1.APIResourceSchema](b)
	if len(schemas) != 1 {
		return fmt.Errorf("want exactly one APIResourceSchema, found %d", len(schemas))
	}
	schema := schemas[0]
	if want, err := SchemaName(&schema.Spec); err != nil || schema.Name != want {
		fail("APIResourceSchema %q: its content hashes to %q (%v): regenerate with hack/update-codegen.sh", schema.Name, want, err)
	}
	if schema.Spec.Group != Group || schema.Spec.Names.Plural != Resource || schema.Spec.Scope != apiextensionsv1.ClusterScoped {
		fail("APIResourceSchema %q: group %q, plural %q, scope %q; want %s, %s, Cluster", schema.Name, schema.Spec.Group, schema.Spec.Names.Plural, schema.Spec.Scope, Group, Resource)
	}

	sliceRef := func(exportName string) {
		e := Find[*apisv1alpha2.APIExport](b, exportName)
		if e == nil {
			fail("no APIExport %q", exportName)
			return
		}
		if len(e.Spec.Resources) != 1 {
			fail("APIExport %q: want one resource, found %d", exportName, len(e.Spec.Resources))
			return
		}
		r := e.Spec.Resources[0]
		if r.Group != Group || r.Name != Resource {
			fail("APIExport %q exports %s.%s, want %s.%s", exportName, r.Name, r.Group, Resource, Group)
		}
		if r.Schema != schema.Name {
			fail("APIExport %q references schema %q, but the bundle's APIResourceSchema is %q", exportName, r.Schema, schema.Name)
		}
		v := r.Storage.Virtual
		if v == nil || r.Storage.CRD != nil {
			fail("APIExport %q: resource %s needs virtual storage and no CRD storage", exportName, Resource)
			return
		}
		if ptr.Deref(v.Reference.APIGroup, "") != cachev1alpha1.SchemeGroupVersion.Group || v.Reference.Kind != "CachedResourceEndpointSlice" || v.Reference.Name != EndpointSliceName {
			fail("APIExport %q: virtual storage references %s/%s %q, want %s/CachedResourceEndpointSlice %q", exportName, ptr.Deref(v.Reference.APIGroup, ""), v.Reference.Kind, v.Reference.Name, cachev1alpha1.SchemeGroupVersion.Group, EndpointSliceName)
		}
		if v.IdentityHash != IdentityHash {
			fail("APIExport %q: identityHash %q, want %q (wildcard requests carry it)", exportName, v.IdentityHash, IdentityHash)
		}
	}
	sliceRef(ExportName)
	sliceRef(EndpointsExportName)
	if e := Find[*apisv1alpha2.APIExport](b, ExportName); e != nil {
		if err := checkSecretClaims(e.Spec.PermissionClaims); err != nil {
			fail("APIExport %q: %v", ExportName, err)
		}
	}
	if e := Find[*apisv1alpha2.APIExport](b, EndpointsExportName); e != nil && len(e.Spec.PermissionClaims) > 0 {
		fail("APIExport %q is never bound; it claims nothing", EndpointsExportName)
	}
	if n := len(All[*apisv1alpha2.APIExport](b)); n != 2 {
		fail("want the two APIExports %q and %q, found %d", ExportName, EndpointsExportName, n)
	}

	slice := Find[*cachev1alpha1.CachedResourceEndpointSlice](b, EndpointSliceName)
	if slice == nil {
		fail("no CachedResourceEndpointSlice %q", EndpointSliceName)
	} else {
		if slice.Spec.CachedResource.Name != CachedResourceName || slice.Spec.CachedResource.Path != "" {
			fail("CachedResourceEndpointSlice %q names CachedResource %q (path %q), want %q in its own workspace", slice.Name, slice.Spec.CachedResource.Name, slice.Spec.CachedResource.Path, CachedResourceName)
		}
		if ref := b.SliceExports[slice.Name]; ref.Name != EndpointsExportName || ref.Path != "" {
			fail("CachedResourceEndpointSlice %q: spec.export is %+v, want the never-bound APIExport %q in its own workspace", slice.Name, ref, EndpointsExportName)
		}
		if len(slice.Status.CachedResourceEndpoints) > 0 {
			fail("CachedResourceEndpointSlice %q: status.endpoints is patched at deployment, not applied", slice.Name)
		}
	}
	if cr := Find[*cachev1alpha1.CachedResource](b, CachedResourceName); cr == nil {
		fail("no CachedResource %q", CachedResourceName)
	} else if _, ok := cr.Annotations[cachev1alpha1.CachedResourceEndpointSliceSkipAnnotation]; !ok {
		fail("CachedResource %q: without annotation %s kcp creates a second slice", cr.Name, cachev1alpha1.CachedResourceEndpointSliceSkipAnnotation)
	}

	// bind on the bound export, for consumers; never on the endpoints export.
	var bindable []string
	for _, role := range All[*rbacv1.ClusterRole](b) {
		for _, rule := range role.Rules {
			if slices.Contains(rule.APIGroups, apisv1alpha2.SchemeGroupVersion.Group) && slices.Contains(rule.Resources, "apiexports") && slices.Contains(rule.Verbs, "bind") {
				if len(rule.ResourceNames) == 0 {
					fail("ClusterRole %q allows bind on every APIExport, including %q", role.Name, EndpointsExportName)
				}
				bindable = append(bindable, rule.ResourceNames...)
			}
		}
	}
	if !slices.Equal(bindable, []string{ExportName}) {
		fail("bind is allowed on %v, want exactly [%s] (ClusterRole %q)", bindable, ExportName, BindRoleName)
	}
	return utilerrors.NewAggregate(errs)
}

func checkSecretClaims(claims []apisv1alpha2.PermissionClaim) error {
	if len(claims) != 1 {
		return fmt.Errorf("want one permission claim (core secrets), found %d", len(claims))
	}
	c := claims[0]
	if c.Group != "" || c.Resource != "secrets" || c.IdentityHash != "" {
		return fmt.Errorf("claims %q in group %q (identityHash %q), want core secrets", c.Resource, c.Group, c.IdentityHash)
	}
	if !sets.New(c.Verbs...).Equal(sets.New(ClaimedSecretVerbs()...)) {
		return fmt.Errorf("claims verbs %v on secrets, want %v", c.Verbs, ClaimedSecretVerbs())
	}
	return nil
}

// CheckBinding checks an APIBinding of a consumer workspace: it binds the export by name and
// accepts exactly the export's claim on Secrets, for all of them (the server reads the
// Secret a mount names, whichever it is).
func CheckBinding(binding *apisv1alpha2.APIBinding) error {
	var errs []error
	if errs := apisv1alpha2.ValidateAPIBinding(binding); len(errs) > 0 {
		return errs.ToAggregate()
	}
	if e := binding.Spec.Reference.Export; e == nil || e.Name != ExportName {
		errs = append(errs, fmt.Errorf("APIBinding %q: binds %+v, want APIExport %q", binding.Name, e, ExportName))
	}
	var accepted []apisv1alpha2.PermissionClaim
	for _, c := range binding.Spec.PermissionClaims {
		if c.State != apisv1alpha2.ClaimAccepted {
			errs = append(errs, fmt.Errorf("APIBinding %q: claim on %q is %s, want %s", binding.Name, c.Resource, c.State, apisv1alpha2.ClaimAccepted))
		}
		if !c.Selector.MatchAll {
			errs = append(errs, fmt.Errorf("APIBinding %q: claim on %q must select all objects", binding.Name, c.Resource))
		}
		accepted = append(accepted, c.PermissionClaim)
	}
	if err := checkSecretClaims(accepted); err != nil {
		errs = append(errs, fmt.Errorf("APIBinding %q: %w", binding.Name, err))
	}
	return utilerrors.NewAggregate(errs)
}
