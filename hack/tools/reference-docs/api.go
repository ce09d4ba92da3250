package main

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/generated/openapi"
)

// modelNamer is what the generated types implement: the name of their OpenAPI definition.
type modelNamer interface{ OpenAPIModelName() string }

func modelName(t reflect.Type) string {
	if n, ok := reflect.New(t).Elem().Interface().(modelNamer); ok {
		return n.OpenAPIModelName()
	}
	return ""
}

// ours says whether t is a type of the Mount API, documented here field by field; other types
// (ObjectMeta, Condition) are Kubernetes' own and named only.
func ours(t reflect.Type) bool {
	return t.PkgPath() == reflect.TypeFor[v1alpha1.Mount]().PkgPath()
}

// object is one documented object of the API: a path to it, its Go type and its fields.
type object struct {
	path string
	typ  reflect.Type
}

// apiReference documents Mount from the OpenAPI definitions the server serves, which
// openapi-gen makes from the doc comments of pkg/apis/mounts/v1alpha1. The order of fields
// is their order in the Go types.
func apiReference() ([]byte, error) {
	defs := openapi.GetOpenAPIDefinitions(func(path string) spec.Ref { return spec.MustCreateRef("#/definitions/" + path) })
	gv := v1alpha1.SchemeGroupVersion
	var buf bytes.Buffer
	buf.WriteString("# Mount API reference\n\n" + generatedNote)
	fmt.Fprintf(&buf, "Group `%s`, version `%s`: `apiVersion: %s`, `kind: Mount`, cluster-scoped, resource `mounts`. "+
		"Every field below is named by its path in the object (`[]` marks a list's items). "+
		"Descriptions are the API's own (`kubectl explain mounts.spec` shows the same).\n\n", gv.Group, gv.Version, gv.String())

	queue := []object{{path: "", typ: reflect.TypeFor[v1alpha1.Mount]()}}
	var sections []string
	var body bytes.Buffer
	for len(queue) > 0 {
		o := queue[0]
		queue = queue[1:]
		def, ok := defs[modelName(o.typ)]
		if !ok {
			return nil, fmt.Errorf("no OpenAPI definition of %s", o.typ)
		}
		heading := o.path
		if heading == "" {
			heading = o.typ.Name()
		}
		sections = append(sections, heading)
		fmt.Fprintf(&body, "## %s\n\n", heading)
		if o.path != "" {
			fmt.Fprintf(&body, "Type `%s`. ", o.typ.Name())
		}
		body.WriteString(text(def.Schema.Description) + "\n\n")

		var rows [][]string
		var children []object
		for _, f := range fields(o.typ) {
			prop, ok := def.Schema.Properties[f.json]
			if !ok {
				return nil, fmt.Errorf("%s.%s: no property %q in the OpenAPI definition", o.typ, f.goName, f.json)
			}
			path := f.json
			if o.path != "" {
				path = o.path + "." + f.json
			}
			elem, list := f.typ, false
			for elem.Kind() == reflect.Pointer || elem.Kind() == reflect.Slice && elem.Elem().Kind() != reflect.Uint8 {
				list = list || elem.Kind() == reflect.Slice
				elem = elem.Elem()
			}
			typ := strings.NewReplacer("[", `\[`, "]", `\]`).Replace(schemaType(prop, defs))
			if elem.Kind() == reflect.Struct {
				if ours(elem) {
					child := path
					if list {
						child += "[]"
					}
					children = append(children, object{path: child, typ: elem})
					typ = strings.Replace(typ, elem.Name(), "["+elem.Name()+"](#"+anchor(child)+")", 1)
				} else {
					typ += " (" + elem.PkgPath() + ")"
				}
			}
			desc := text(prop.Description)
			if slices.Contains(def.Schema.Required, f.json) {
				desc = "**Required.** " + desc
			}
			rows = append(rows, []string{code(path), typ, defaultOf(prop), desc})
		}
		table(&body, []string{"Field", "Type", "Default", "Description"}, rows)
		// Depth first: an object's parts right after it.
		queue = append(children, queue...)
	}
	buf.WriteString("Objects:\n\n")
	for _, s := range sections {
		fmt.Fprintf(&buf, "- [%s](#%s)\n", s, anchor(s))
	}
	buf.WriteString("\n")
	buf.Write(body.Bytes())
	return append(bytes.TrimRight(buf.Bytes(), "\n"), '\n'), nil
}

// field is a JSON field of a Go struct, with inlined structs' fields in their place.
type field struct {
	goName, json string
	typ          reflect.Type
}

func fields(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && (name == "" && strings.Contains(","+opts+",", ",inline,")) {
			out = append(out, fields(f.Type)...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, field{goName: f.Name, json: name, typ: f.Type})
	}
	return out
}

// schemaType says a property's type as the API has it: the OpenAPI type and format, a
// referenced definition by its Go name, a list's item type after [].
func schemaType(s spec.Schema, defs map[string]common.OpenAPIDefinition) string {
	if ref := s.Ref.String(); ref != "" {
		name := strings.TrimPrefix(ref, "#/definitions/")
		return name[strings.LastIndex(name, ".")+1:]
	}
	if len(s.Type) == 0 {
		return "any"
	}
	t := s.Type[0]
	switch t {
	case "array":
		if s.Items != nil && s.Items.Schema != nil {
			return "[]" + schemaType(*s.Items.Schema, defs)
		}
		return "[]any"
	case "object":
		if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
			return "map[string]" + schemaType(*s.AdditionalProperties.Schema, defs)
		}
	case "string":
		switch s.Format {
		case "byte":
			return "string (base64)"
		case "":
		default:
			return "string (" + s.Format + ")"
		}
		if len(s.Enum) > 0 {
			var vals []string
			for _, v := range s.Enum {
				vals = append(vals, code(fmt.Sprint(v)))
			}
			return "string: " + strings.Join(vals, ", ")
		}
	case "integer", "number":
		if s.Format != "" {
			return t + " (" + s.Format + ")"
		}
	}
	return t
}

// defaultOf is the property's default when it says something: openapi-gen gives every
// required string and every struct a zero default, which the table leaves out.
func defaultOf(s spec.Schema) string {
	switch d := s.Default.(type) {
	case nil:
		return ""
	case string:
		return code(d)
	case map[string]any:
		if len(d) == 0 {
			return ""
		}
	case []any:
		if len(d) == 0 {
			return ""
		}
	}
	return code(fmt.Sprint(s.Default))
}
