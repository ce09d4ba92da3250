package export

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/kcp-dev/mount-apiserver/pkg/generated/openapi"
)

// TestSchemaIsAValidCRDSchema holds the generated APIResourceSchema to what apiextensions
// requires of a CRD (structural schema, defaults that validate, list-map keys that are
// required, printer columns), which is what kcp requires of an APIResourceSchema.
func TestSchemaIsAValidCRDSchema(t *testing.T) {
	s, err := APIResourceSchema(openapi.GetOpenAPIDefinitions)
	if err != nil {
		t.Fatal(err)
	}
	v := s.Spec.Versions[0]
	props, err := v.GetSchema()
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: s.Spec.Names.Plural + "." + s.Spec.Group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: s.Spec.Group,
			Names: s.Spec.Names,
			Scope: s.Spec.Scope,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: v.Name, Served: v.Served, Storage: v.Storage,
				Schema:                   &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: props},
				Subresources:             &v.Subresources,
				AdditionalPrinterColumns: v.AdditionalPrinterColumns,
			}},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: []string{v.Name}},
	}
	apiextensionsv1.SetObjectDefaults_CustomResourceDefinition(crd)
	var internal apiextensions.CustomResourceDefinition
	if err := apiextensionsv1.Convert_v1_CustomResourceDefinition_To_apiextensions_CustomResourceDefinition(crd, &internal, nil); err != nil {
		t.Fatal(err)
	}
	if errs := validation.ValidateCustomResourceDefinition(context.Background(), &internal); len(errs) > 0 {
		t.Errorf("the schema is not a valid CRD schema:\n%v", errs.ToAggregate())
	}

	// What the conversion must have done.
	if m := props.Properties["metadata"]; m.Type != "object" || len(m.Properties) > 0 {
		t.Errorf("metadata: %+v, want only type: object", m)
	}
	spec := props.Properties["spec"]
	if spec.Default != nil {
		t.Errorf("spec has default %s; zero-value object defaults must go", spec.Default.Raw)
	}
	if got := string(spec.Properties["type"].Default.Raw); got != `"URL"` {
		t.Errorf("spec.type default %s, want \"URL\"", got)
	}
	if d := spec.Properties["ref"].Properties["name"].Default; d != nil {
		t.Errorf("spec.ref.name has default %s; an empty string says nothing", d.Raw)
	}
	cond := props.Properties["status"].Properties["conditions"]
	if cond.XListType == nil || *cond.XListType != "map" || len(cond.XListMapKeys) != 1 || cond.Items.Schema.Properties["lastTransitionTime"].Format != "date-time" {
		t.Errorf("status.conditions lost its list type or its items' $refs: %+v", cond)
	}
	if v.Subresources.Status == nil || v.Subresources.Scale != nil {
		t.Errorf("subresources %+v, want status only", v.Subresources)
	}
}

// TestSchemaNameFollowsContent: the same input gives the same name, any change a new one.
func TestSchemaNameFollowsContent(t *testing.T) {
	a, err := APIResourceSchema(openapi.GetOpenAPIDefinitions)
	if err != nil {
		t.Fatal(err)
	}
	b, err := APIResourceSchema(openapi.GetOpenAPIDefinitions)
	if err != nil {
		t.Fatal(err)
	}
	if a.Name != b.Name || !strings.HasSuffix(a.Name, ".mounts.mounts.kcp.io") || len(a.Name) != len("v0123456789.mounts.mounts.kcp.io") {
		t.Fatalf("names %q and %q", a.Name, b.Name)
	}
	changed := func(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
		defs := openapi.GetOpenAPIDefinitions(ref)
		for name, def := range defs {
			if strings.HasSuffix(name, ".MountStatus") {
				p := def.Schema.Properties["URL"]
				p.Description += " Changed."
				def.Schema.Properties["URL"] = p
				defs[name] = def
			}
		}
		return defs
	}
	c, err := APIResourceSchema(changed)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name == a.Name {
		t.Errorf("a changed description kept the name %q", a.Name)
	}
}

// TestStructuralSchemaRefuses what a structural schema cannot say, naming the field.
func TestStructuralSchemaRefuses(t *testing.T) {
	str := spec.Schema{SchemaProps: spec.SchemaProps{Type: []string{"string"}}}
	for _, tc := range []struct {
		name string
		defs func(common.ReferenceCallback) map[string]common.OpenAPIDefinition
		want string
	}{{
		name: "recursion",
		defs: func(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
			return map[string]common.OpenAPIDefinition{"root": {Schema: spec.Schema{SchemaProps: spec.SchemaProps{
				Type: []string{"object"}, Properties: map[string]spec.Schema{"self": {SchemaProps: spec.SchemaProps{Ref: ref("root")}}},
			}}}}
		},
		want: `openAPIV3Schema.properties[self].$ref: Invalid value: "root": recursive`,
	}, {
		name: "missing reference",
		defs: func(ref common.ReferenceCallback) map[string]common.OpenAPIDefinition {
			return map[string]common.OpenAPIDefinition{"root": {Schema: spec.Schema{SchemaProps: spec.SchemaProps{
				Type: []string{"object"}, Properties: map[string]spec.Schema{"x": {SchemaProps: spec.SchemaProps{Ref: ref("gone")}}},
			}}}}
		},
		want: "openAPIV3Schema.properties[x].$ref: Not found",
	}, {
		name: "no type",
		defs: func(common.ReferenceCallback) map[string]common.OpenAPIDefinition {
			return map[string]common.OpenAPIDefinition{"root": {Schema: spec.Schema{SchemaProps: spec.SchemaProps{
				Type: []string{"object"}, Properties: map[string]spec.Schema{"raw": {}},
			}}}}
		},
		want: "openAPIV3Schema.properties[raw].type: Required",
	}, {
		name: "anyOf",
		defs: func(common.ReferenceCallback) map[string]common.OpenAPIDefinition {
			return map[string]common.OpenAPIDefinition{"root": {Schema: spec.Schema{SchemaProps: spec.SchemaProps{
				Type: []string{"object"}, Properties: map[string]spec.Schema{"x": {SchemaProps: spec.SchemaProps{AnyOf: []spec.Schema{str, str}}}},
			}}}}
		},
		want: "openAPIV3Schema.properties[x]: Invalid value",
	}, {
		name: "unknown extension",
		defs: func(common.ReferenceCallback) map[string]common.OpenAPIDefinition {
			s := str
			s.Extensions = spec.Extensions{"x-kubernetes-new-thing": true}
			return map[string]common.OpenAPIDefinition{"root": {Schema: spec.Schema{SchemaProps: spec.SchemaProps{
				Type: []string{"object"}, Properties: map[string]spec.Schema{"x": s},
			}}}}
		},
		want: `openAPIV3Schema.properties[x].x-kubernetes-new-thing: Unsupported value: "x-kubernetes-new-thing"`,
	}, {
		name: "two types",
		defs: func(common.ReferenceCallback) map[string]common.OpenAPIDefinition {
			return map[string]common.OpenAPIDefinition{"root": {Schema: spec.Schema{SchemaProps: spec.SchemaProps{
				Type: []string{"object", "string"},
			}}}}
		},
		want: "openAPIV3Schema.type: Invalid value",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := StructuralSchema(tc.defs, "root")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
