package rewrite

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// Class says what a request is to the rewriter, and so what the proxy must do with it.
type Class int

const (
	// Untouched requests pass as they are, bodies and responses included.
	Untouched Class = iota
	// NotFound requests name a target group that the mount does not present (a rule's target
	// group, or a target group that carries a presented name): answer 404.
	NotFound
	// Resource requests reach a renamed group's resources: JSON only (protobuf and CBOR 415,
	// Accept negotiated to JSON), bodies and responses rewritten.
	Resource
	// Objects requests reach resources of other groups: objects keep their names, but their
	// metadata (label, annotation and finalizer keys, ownerReferences, managedFields) and the
	// references that some kinds carry (CRDs, RBAC, webhook configurations, admission
	// policies, access reviews, Events) are rewritten. JSON only as for Resource.
	Objects
	// Discovery requests are /apis, /apis/<group> and /apis/<group>/<version>, plain or
	// aggregated (Accept negotiated to JSON).
	Discovery
	// OpenAPI requests are /openapi/v2, /openapi/v3 and /openapi/v3/apis/<group>/<version>
	// (Accept negotiated to JSON).
	OpenAPI
)

func (c Class) String() string {
	switch c {
	case Untouched:
		return "Untouched"
	case NotFound:
		return "NotFound"
	case Resource:
		return "Resource"
	case Objects:
		return "Objects"
	case Discovery:
		return "Discovery"
	case OpenAPI:
		return "OpenAPI"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Rewrites reports whether bodies and responses of this class are rewritten (and so must be JSON).
func (c Class) Rewrites() bool { return c >= Resource }

// Request is a classified request: the target path and query, and what rewriting its body and
// its response need.
type Request struct {
	Class Class
	// Path and Query are what to send to the target.
	Path  string
	Query url.Values
	// Watch is true for watch requests (?watch=true or /watch/): the response is a stream of
	// watch events.
	Watch bool

	rules *Rules
	// rule is the group rule of a Resource request, or of group discovery and OpenAPI.
	rule *groupRule
	// group and resource are the target's names of the requested resource ("" and "events"
	// for core Events).
	group, resource string
	// discovery is how deep a Discovery request is: 1 /apis, 2 /apis/<g>, 3 /apis/<g>/<v>.
	discovery int
	// openapi is "v2", "v3" (the index) or "v3group".
	openapi string
	// budget bounds the memory of whole-document rewrites server-wide; ctx ends the wait
	// for it (see WithBudget).
	budget *Budget
	ctx    context.Context
}

// WithBudget returns the request with the Budget under which its response's discovery or
// OpenAPI document is rewritten; ctx (the caller's request) ends a wait for it. Without one,
// only the document's size is bounded.
func (q Request) WithBudget(ctx context.Context, b *Budget) Request {
	q.ctx, q.budget = ctx, b
	return q
}

// Request classifies a request by method, path and query (all as the client sent them, in
// presented names) and returns it with the target path and query. Bad selectors are errors
// (answer 400).
func (r *Rules) Request(method, path string, query url.Values) (Request, error) {
	req := Request{Class: Untouched, Path: path, Query: query, rules: r}
	if query != nil {
		if w := query.Get("watch"); w == "true" || w == "1" {
			req.Watch = true
		}
	}
	if r == nil {
		return req, nil
	}
	trimmed := strings.Trim(path, "/")
	parts := strings.Split(trimmed, "/")
	switch {
	case trimmed == "" || (parts[0] != "api" && parts[0] != "apis" && parts[0] != "openapi"):
		return req, nil
	case parts[0] == "openapi":
		return r.openAPIRequest(req, parts)
	case parts[0] == "api":
		if len(parts) < 3 {
			return req, nil // core discovery: nothing renamed
		}
		return r.resourceRequest(req, "", parts[1], parts[2:])
	}
	// /apis...
	if len(parts) == 1 {
		req.Class, req.discovery = Discovery, 1
		return req, nil
	}
	group := parts[1]
	rule := r.byPresented[group]
	if rule == nil {
		if r.hiddenTargetGroup(group) {
			req.Class = NotFound
			return req, nil
		}
		if len(parts) < 4 {
			return req, nil
		}
		return r.resourceRequest(req, group, parts[2], parts[3:])
	}
	parts[1] = rule.target
	req.rule = rule
	if len(parts) < 4 {
		req.Class, req.discovery = Discovery, len(parts)
		req.Path = joinPath(parts, req.Path)
		return req, nil
	}
	return r.resourceRequest(req, group, parts[2], parts[3:])
}

// resourceRequest classifies /api/<v>/... and /apis/<g>/<v>/... below the version: rest is
// [watch/][namespaces/<ns>/]<resource>[/<name>[/<subresource>...]].
func (r *Rules) resourceRequest(req Request, group, version string, rest []string) (Request, error) {
	prefix := []string{"apis", group, version}
	if group == "" {
		prefix = []string{"api", version}
	}
	if rest[0] == "watch" {
		req.Watch = true
		prefix = append(prefix, "watch")
		rest = rest[1:]
	}
	if len(rest) >= 3 && rest[0] == "namespaces" && !(group == "" && len(rest) == 3 && (rest[2] == "status" || rest[2] == "finalize")) {
		prefix = append(prefix, rest[0], rest[1])
		rest = rest[2:]
	}
	if len(rest) == 0 || rest[0] == "" {
		return req, nil
	}
	resource := rest[0]
	if req.rule != nil {
		req.Class = Resource
		prefix[1] = req.rule.target
		if res, ok := req.rule.resource(toTarget, resource); ok {
			rest[0] = res
		}
		req.group, req.resource = req.rule.target, rest[0]
	} else {
		req.Class = Objects
		req.group, req.resource = group, resource
		if req.crds() && len(rest) > 1 {
			// A CRD's name is <plural>.<group>.
			if n, ok := r.crdName(toTarget, rest[1]); ok {
				rest[1] = n
			}
		}
	}
	req.Path = joinPath(append(prefix, rest...), req.Path)
	q, err := r.query(req, req.Query)
	if err != nil {
		return Request{}, err
	}
	req.Query = q
	return req, nil
}

// crds reports whether the request is for CustomResourceDefinitions.
func (q Request) crds() bool {
	return q.group == "apiextensions.k8s.io" && q.resource == "customresourcedefinitions"
}

// crdName renames a CRD name (<plural>.<group>) of a renamed group.
func (r *Rules) crdName(d direction, name string) (string, bool) {
	plural, g, ok := strings.Cut(name, ".")
	if !ok {
		return name, false
	}
	ng, np, ok := r.groupResource(d, g, plural)
	if !ok {
		return name, false
	}
	return np + "." + ng, true
}

// query rewrites labelSelector and fieldSelector.
func (r *Rules) query(req Request, in url.Values) (url.Values, error) {
	if len(in) == 0 {
		return in, nil
	}
	var out url.Values
	set := func(k, v string) {
		if out == nil {
			out = url.Values{}
			for kk, vv := range in {
				out[kk] = append([]string(nil), vv...)
			}
		}
		out.Set(k, v)
	}
	if s := in.Get("labelSelector"); s != "" {
		ns, changed, err := r.labelSelector(toTarget, s)
		if err != nil {
			return nil, err
		}
		if changed {
			set("labelSelector", ns)
		}
	}
	if s := in.Get("fieldSelector"); s != "" {
		ns, changed, err := r.fieldSelector(toTarget, req.group, req.resource, s)
		if err != nil {
			return nil, err
		}
		if changed {
			set("fieldSelector", ns)
		}
	}
	if out == nil {
		return in, nil
	}
	return out, nil
}

// labelSelector renames the keys of a label selector.
func (r *Rules) labelSelector(d direction, s string) (string, bool, error) {
	if len(r.prefixes) == 0 {
		return s, false, nil
	}
	sel, err := labels.Parse(s)
	if err != nil {
		return "", false, fmt.Errorf("labelSelector: %w", err)
	}
	reqs, _ := sel.Requirements()
	changed := false
	out := labels.NewSelector()
	for _, q := range reqs {
		k, ok := r.key(d, q.Key())
		if !ok {
			out = out.Add(q)
			continue
		}
		changed = true
		nq, err := labels.NewRequirement(k, q.Operator(), q.ValuesUnsorted())
		if err != nil {
			return "", false, fmt.Errorf("labelSelector: renamed key %q: %w", k, err)
		}
		out = out.Add(*nq)
	}
	if !changed {
		return s, false, nil
	}
	return out.String(), true, nil
}

// fieldSelector renames values of field selectors that name renamed things: a CRD's
// metadata.name (<plural>.<group>) and the apiVersion and kind of Events' objects.
func (r *Rules) fieldSelector(d direction, group, resource, s string) (string, bool, error) {
	var apiVersionField, kindField string
	switch {
	case group == "apiextensions.k8s.io" && resource == "customresourcedefinitions":
	case group == "" && resource == "events":
		apiVersionField, kindField = "involvedObject.apiVersion", "involvedObject.kind"
	case group == "events.k8s.io" && resource == "events":
		apiVersionField, kindField = "regarding.apiVersion", "regarding.kind"
	default:
		return s, false, nil
	}
	sel, err := fields.ParseSelector(s)
	if err != nil {
		return "", false, fmt.Errorf("fieldSelector: %w", err)
	}
	reqs := sel.Requirements()
	apiVersion := ""
	for _, q := range reqs {
		if q.Field == apiVersionField && apiVersionField != "" {
			apiVersion = q.Value
		}
	}
	changed := false
	parts := make([]string, 0, len(reqs))
	for _, q := range reqs {
		v := q.Value
		switch {
		case q.Field == "metadata.name" && kindField == "":
			v, _ = r.crdName(d, v)
		case q.Field == apiVersionField && apiVersionField != "":
			v, _, _ = r.gvk(d, v, "")
		case q.Field == kindField && kindField != "" && apiVersion != "":
			_, v, _ = r.gvk(d, apiVersion, v)
		}
		if v != q.Value {
			changed = true
		}
		op := "="
		switch q.Operator {
		case selection.DoubleEquals:
			op = "=="
		case selection.NotEquals:
			op = "!="
		}
		parts = append(parts, q.Field+op+fields.EscapeValue(v))
	}
	if !changed {
		return s, false, nil
	}
	return strings.Join(parts, ","), true, nil
}

// openAPIRequest classifies /openapi/v2, /openapi/v3 and /openapi/v3/apis/<g>/<v>.
func (r *Rules) openAPIRequest(req Request, parts []string) (Request, error) {
	switch {
	case len(parts) == 2 && parts[1] == "v2":
		req.Class, req.openapi = OpenAPI, "v2"
	case len(parts) == 2 && parts[1] == "v3":
		req.Class, req.openapi = OpenAPI, "v3"
	case len(parts) == 5 && parts[1] == "v3" && parts[2] == "apis":
		if rule := r.byPresented[parts[3]]; rule != nil {
			parts[3] = rule.target
			req.Class, req.openapi, req.rule = OpenAPI, "v3group", rule
			req.Path = joinPath(parts, req.Path)
		} else if r.hiddenTargetGroup(parts[3]) {
			req.Class = NotFound
		}
	}
	return req, nil
}

// joinPath joins path segments, keeping a trailing slash of the original path.
func joinPath(parts []string, orig string) string {
	p := "/" + strings.Join(parts, "/")
	if strings.HasSuffix(orig, "/") && !strings.HasSuffix(p, "/") {
		p += "/"
	}
	return p
}
