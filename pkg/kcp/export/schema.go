package export

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// Definitions returns OpenAPI definitions by model name, as openapi-gen's
// GetOpenAPIDefinitions does.
type Definitions func(common.ReferenceCallback) map[string]common.OpenAPIDefinition

const refPrefix = "#/definitions/"

// StructuralSchema converts the OpenAPI definition named root into a structural schema as
// apiextensions and kcp require: $refs resolved, one type per node, the root's metadata
// reduced to `type: object` (as for CRDs), and defaults that only restate Go's zero value
// left out. A construct it cannot express is an error naming its field path, never dropped
// silently.
func StructuralSchema(getDefs Definitions, root string) (*apiextensionsv1.JSONSchemaProps, error) {
	defs := getDefs(func(name string) spec.Ref { return spec.MustCreateRef(refPrefix + name) })
	def, ok := defs[root]
	if !ok {
		return nil, fmt.Errorf("no OpenAPI definition %q", root)
	}
	c := &converter{defs: defs, stack: []string{root}}
	return c.convert(def.Schema, field.NewPath("openAPIV3Schema"), true)
}

type converter struct {
	defs  map[string]common.OpenAPIDefinition
	stack []string // definitions being converted, to refuse recursion
}

// refOf returns the definition a schema refers to, directly or as the single member of an
// allOf (how openapi-gen attaches a description or default to a reference).
func refOf(s spec.Schema) (string, bool) {
	if r := s.Ref.String(); r != "" {
		return strings.TrimPrefix(r, refPrefix), true
	}
	if len(s.AllOf) == 1 {
		if r := s.AllOf[0].Ref.String(); r != "" {
			return strings.TrimPrefix(r, refPrefix), true
		}
	}
	return "", false
}

func (c *converter) convert(s spec.Schema, path *field.Path, root bool) (*apiextensionsv1.JSONSchemaProps, error) {
	if name, ok := refOf(s); ok {
		def, found := c.defs[name]
		if !found {
			return nil, field.NotFound(path.Child("$ref"), name)
		}
		if slices.Contains(c.stack, name) {
			return nil, field.Invalid(path.Child("$ref"), name, "recursive schemas cannot be structural")
		}
		c.stack = append(c.stack, name)
		out, err := c.convert(def.Schema, path, false)
		c.stack = c.stack[:len(c.stack)-1]
		if err != nil {
			return nil, err
		}
		// The field's own description and default say more than the referenced type's.
		if s.Description != "" {
			out.Description = s.Description
		}
		if err := setDefault(out, s.Default, path); err != nil {
			return nil, err
		}
		return out, nil
	}
	if len(s.AllOf) > 0 || len(s.AnyOf) > 0 || len(s.OneOf) > 0 || s.Not != nil {
		return nil, field.Invalid(path, "allOf/anyOf/oneOf/not", "not supported by the generator")
	}

	out := &apiextensionsv1.JSONSchemaProps{
		Description:      s.Description,
		Format:           s.Format,
		Title:            s.Title,
		Maximum:          s.Maximum,
		ExclusiveMaximum: s.ExclusiveMaximum,
		Minimum:          s.Minimum,
		ExclusiveMinimum: s.ExclusiveMinimum,
		MaxLength:        s.MaxLength,
		MinLength:        s.MinLength,
		Pattern:          s.Pattern,
		MaxItems:         s.MaxItems,
		MinItems:         s.MinItems,
		MultipleOf:       s.MultipleOf,
		MaxProperties:    s.MaxProperties,
		MinProperties:    s.MinProperties,
		Nullable:         s.Nullable,
	}
	if s.UniqueItems {
		return nil, field.Invalid(path.Child("uniqueItems"), true, "structural schemas forbid uniqueItems")
	}
	if err := c.extensions(s, out, path); err != nil {
		return nil, err
	}
	switch len(s.Type) {
	case 0:
		if !out.XIntOrString && (out.XPreserveUnknownFields == nil || !*out.XPreserveUnknownFields) {
			return nil, field.Required(path.Child("type"), "structural schemas need a type (or x-kubernetes-int-or-string, x-kubernetes-preserve-unknown-fields)")
		}
	case 1:
		out.Type = s.Type[0]
	default:
		return nil, field.Invalid(path.Child("type"), s.Type, "structural schemas allow one type")
	}
	for _, e := range s.Enum {
		raw, err := json.Marshal(e)
		if err != nil {
			return nil, field.Invalid(path.Child("enum"), e, err.Error())
		}
		out.Enum = append(out.Enum, apiextensionsv1.JSON{Raw: raw})
	}
	if err := setDefault(out, s.Default, path); err != nil {
		return nil, err
	}
	out.Required = slices.Clone(s.Required)

	if len(s.Properties) > 0 {
		out.Properties = make(map[string]apiextensionsv1.JSONSchemaProps, len(s.Properties))
		for name, p := range s.Properties {
			if root && name == "metadata" {
				// As for CRDs: the server validates ObjectMeta itself, and kcp and
				// apiextensions accept nothing more than this at the root.
				out.Properties[name] = apiextensionsv1.JSONSchemaProps{Type: "object"}
				continue
			}
			conv, err := c.convert(p, path.Child("properties").Key(name), false)
			if err != nil {
				return nil, err
			}
			out.Properties[name] = *conv
		}
	}
	if s.Items != nil {
		if s.Items.Schema == nil || len(s.Items.Schemas) > 0 {
			return nil, field.Invalid(path.Child("items"), "tuple", "structural schemas need a single items schema")
		}
		conv, err := c.convert(*s.Items.Schema, path.Child("items"), false)
		if err != nil {
			return nil, err
		}
		out.Items = &apiextensionsv1.JSONSchemaPropsOrArray{Schema: conv}
	}
	if ap := s.AdditionalProperties; ap != nil {
		if ap.Schema == nil {
			return nil, field.Invalid(path.Child("additionalProperties"), ap.Allows, "structural schemas need an additionalProperties schema, not a boolean")
		}
		if len(s.Properties) > 0 {
			return nil, field.Invalid(path.Child("additionalProperties"), "", "structural schemas forbid properties and additionalProperties together")
		}
		conv, err := c.convert(*ap.Schema, path.Child("additionalProperties"), false)
		if err != nil {
			return nil, err
		}
		out.AdditionalProperties = &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: conv}
	}
	return out, nil
}

func (c *converter) extensions(s spec.Schema, out *apiextensionsv1.JSONSchemaProps, path *field.Path) error {
	for key, value := range s.Extensions {
		key = strings.ToLower(key)
		fldPath := path.Child(key)
		switch key {
		case "x-kubernetes-list-type":
			v, ok := value.(string)
			if !ok {
				return field.Invalid(fldPath, value, "must be a string")
			}
			out.XListType = &v
		case "x-kubernetes-list-map-keys":
			keys, ok := s.Extensions.GetStringSlice(key)
			if !ok {
				return field.Invalid(fldPath, value, "must be a list of strings")
			}
			out.XListMapKeys = keys
		case "x-kubernetes-map-type":
			v, ok := value.(string)
			if !ok {
				return field.Invalid(fldPath, value, "must be a string")
			}
			out.XMapType = &v
		case "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource":
			v, ok := value.(bool)
			if !ok {
				return field.Invalid(fldPath, value, "must be a boolean")
			}
			switch key {
			case "x-kubernetes-int-or-string":
				out.XIntOrString = v
			case "x-kubernetes-preserve-unknown-fields":
				out.XPreserveUnknownFields = &v
			default:
				out.XEmbeddedResource = v
			}
		case "x-kubernetes-validations":
			raw, err := json.Marshal(value)
			if err != nil {
				return field.Invalid(fldPath, value, err.Error())
			}
			if err := json.Unmarshal(raw, &out.XValidations); err != nil {
				return field.Invalid(fldPath, value, err.Error())
			}
		case "x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key", "x-kubernetes-unions", "x-kubernetes-group-version-kind":
			// Dropped on purpose: a CRD-style schema cannot express them, and the server
			// itself serves those semantics (strategic merge patch, unions).
		default:
			// An extension nobody decided about may carry meaning: refuse it.
			return field.NotSupported[string](fldPath, key, nil)
		}
	}
	return nil
}

// setDefault keeps a default only when it says more than the Go zero value that openapi-gen
// writes for every non-pointer field ({} for structs, "" for strings): those would make kcp
// and apiextensions default whole objects (and fail validation of required fields in them)
// where the server never does.
func setDefault(out *apiextensionsv1.JSONSchemaProps, value any, path *field.Path) error {
	if value == nil {
		return nil
	}
	if v := reflect.ValueOf(value); v.IsZero() || ((v.Kind() == reflect.Map || v.Kind() == reflect.Slice) && v.Len() == 0) {
		return nil
	}
	raw, err := json.Marshal(value)
	if err != nil {
		return field.Invalid(path.Child("default"), value, err.Error())
	}
	out.Default = &apiextensionsv1.JSON{Raw: raw}
	return nil
}
