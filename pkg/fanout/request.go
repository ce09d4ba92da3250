package fanout

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"
	apirequest "k8s.io/apiserver/pkg/endpoints/request"
)

// Name is the mount name that addresses the fan-out: mounts/*/proxy/<path>. Authorization
// of the request itself sees this name (RBAC: get on mounts/proxy with resourceName "*", or
// without resourceNames); each member is then authorized by its own name.
const Name = "*"

// LabelsSegment begins the path form that selects mounts by their labels:
// mounts/*/proxy/labels/<selector>/<path>, e.g. `kubectl --server
// https://hub/apis/mounts.kcp.io/v1alpha1/mounts/*/proxy/labels/env=prod get pods -A`. The
// selector runs up to the segment api or apis that begins the Kubernetes path, so label keys
// with a prefix (example.com/env=prod) work too. It is in the path because kubectl keeps a
// --server URL's path and drops its query, and not in the mount's name because authorization
// of the request (the aggregator's and kcp's too) sees that name: RBAC grants "*" once, not
// every selector.
const LabelsSegment = "labels"

// Path is the path after mounts/*/proxy, parsed.
type Path struct {
	// Selector selects Mounts by their labels; Everything without the labels/ form.
	Selector labels.Selector
	// SelectorText is the selector as written ("" without the labels/ form).
	SelectorText string
	// Kube is the Kubernetes path the members are asked, e.g. /api/v1/pods.
	Kube string
}

// ParsePath parses the path after mounts/*/proxy.
func ParsePath(inner string) (Path, error) {
	inner = "/" + strings.TrimPrefix(inner, "/")
	p := Path{Selector: labels.Everything(), Kube: inner}
	rest, ok := strings.CutPrefix(inner, "/"+LabelsSegment+"/")
	if !ok {
		if inner == "/"+LabelsSegment {
			return p, fmt.Errorf("mounts/*/proxy/%s/<label selector>/<path>: the label selector and the Kubernetes path are missing", LabelsSegment)
		}
		return p, nil
	}
	segments := strings.Split(rest, "/")
	end := -1
	for i, s := range segments {
		if s == "api" || s == "apis" {
			end = i
			break
		}
	}
	if end < 0 {
		return p, fmt.Errorf("mounts/*/proxy/%s/<label selector>/<path>: no Kubernetes path (/api/... or /apis/...) follows the selector %q", LabelsSegment, rest)
	}
	p.SelectorText = strings.Join(segments[:end], "/")
	if p.SelectorText == "" {
		return p, fmt.Errorf("mounts/*/proxy/%s/<label selector>/<path>: the label selector is empty", LabelsSegment)
	}
	sel, err := labels.Parse(p.SelectorText)
	if err != nil {
		return p, fmt.Errorf("mounts/*/proxy/%s/%s: the label selector does not parse: %w", LabelsSegment, p.SelectorText, err)
	}
	p.Selector = sel
	p.Kube = "/" + strings.Join(segments[end:], "/")
	return p, nil
}

// KubePath returns the Kubernetes path of a path after mounts/*/proxy, for checks (such as the
// long-running one) that must see what the members are asked.
func KubePath(inner string) string {
	p, err := ParsePath(inner)
	if err != nil {
		return "/" + strings.TrimPrefix(inner, "/")
	}
	return p.Kube
}

// kind is what a fan-out request asks.
type kind int

const (
	kindRefused kind = iota
	kindList
	kindWatch
	kindDiscovery
)

var kubeRequestInfo = &apirequest.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// request is a fan-out request, classified.
type request struct {
	kind kind
	// path is what the members are asked: a watch as a collection path with watch=true.
	path  string
	query url.Values
	// refusal says why a request is refused, with its code.
	refusal string
	code    int
	info    *apirequest.RequestInfo
}

// classify decides what a request to mounts/*/proxy<kubePath> is.
func classify(method, kubePath string, query url.Values) request {
	r := request{path: kubePath, query: query}
	if method != http.MethodGet {
		r.code = http.StatusMethodNotAllowed
		r.refusal = fmt.Sprintf("mounts/*/proxy serves reads across mounts only (list, watch, discovery), and %s is no read: send it to one mount, through mounts/<name>/proxy%s", method, kubePath)
		u := &url.URL{Path: kubePath}
		if info, err := kubeRequestInfo.NewRequestInfo(&http.Request{Method: method, URL: u}); err == nil && info.IsResourceRequest {
			if mount, name, ok := SplitName(info.Name); ok {
				r.refusal = fmt.Sprintf("mounts/*/proxy serves reads across mounts only (list, watch, discovery), and %s is no read: %q is in mount %q, send it through mounts/%s/proxy%s",
					method, info.Name, mount, mount, strings.Replace(kubePath, "/"+info.Name, "/"+name, 1))
			}
		}
		return r
	}
	trimmed := strings.TrimSuffix(kubePath, "/")
	if isDiscoveryPath(trimmed) {
		r.kind, r.path = kindDiscovery, trimmed
		return r
	}
	u := &url.URL{Path: kubePath, RawQuery: query.Encode()}
	info, err := kubeRequestInfo.NewRequestInfo(&http.Request{Method: method, URL: u})
	if err != nil || !info.IsResourceRequest {
		r.code = http.StatusNotFound
		r.refusal = fmt.Sprintf("mounts/*/proxy serves lists, watches and discovery (/api, /apis) across mounts, and %s is none of them: ask one mount, through mounts/<name>/proxy%s", kubePath, kubePath)
		return r
	}
	r.info = info
	switch {
	case info.Subresource != "":
		r.code = http.StatusBadRequest
		r.refusal = fmt.Sprintf("mounts/*/proxy serves lists and watches of resources, not the subresource %s of one object: ask its mount, through mounts/<mount>/proxy with the object's own name", info.Subresource)
		if mount, name, ok := SplitName(info.Name); ok {
			r.refusal = fmt.Sprintf("%s of %q is in mount %q: ask it there, through mounts/%s/proxy%s", info.Subresource, info.Name, mount, mount, strings.Replace(kubePath, "/"+info.Name+"/", "/"+name+"/", 1))
		}
	case info.Verb == "get":
		r.code = http.StatusBadRequest
		r.refusal = fmt.Sprintf("mounts/*/proxy serves lists and watches, not one object (which mount?): get %q through mounts/<mount>/proxy%s; objects listed here are named <mount>%s<name>", info.Name, kubePath, NameSeparator)
		if mount, name, ok := SplitName(info.Name); ok {
			r.refusal = fmt.Sprintf("%q is in mount %q: get it through mounts/%s/proxy%s (mounts/*/proxy serves lists and watches, not single objects)", info.Name, mount, mount, strings.TrimSuffix(kubePath, info.Name)+name)
		}
	case info.Verb == "list":
		r.kind = kindList
	case info.Verb == "watch":
		r.kind = kindWatch
		r.path = withoutWatchSegment(kubePath)
		q := url.Values{}
		for k, v := range query {
			q[k] = v
		}
		q.Set("watch", "true")
		r.query = q
	default:
		r.code = http.StatusMethodNotAllowed
		r.refusal = fmt.Sprintf("mounts/*/proxy serves list and watch across mounts, not %s", info.Verb)
	}
	return r
}

// isDiscoveryPath: /api, /apis, /api/<version>, /apis/<group>, /apis/<group>/<version>.
func isDiscoveryPath(p string) bool {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	switch parts[0] {
	case "api":
		return len(parts) <= 2 && !slicesContainsEmpty(parts)
	case "apis":
		return len(parts) <= 3 && !slicesContainsEmpty(parts)
	}
	return false
}

func slicesContainsEmpty(parts []string) bool {
	for _, p := range parts {
		if p == "" {
			return true
		}
	}
	return false
}

// withoutWatchSegment turns /api/v1/watch/pods into /api/v1/pods (the old watch form).
func withoutWatchSegment(p string) string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	at := 2 // api/v1/watch
	if len(parts) > 0 && parts[0] == "apis" {
		at = 3 // apis/g/v/watch
	}
	if len(parts) > at && parts[at] == "watch" {
		parts = append(parts[:at], parts[at+1:]...)
	}
	return "/" + strings.Join(parts, "/")
}

// memberSelectors are the selectors of a fan-out request, split into what selects mounts and
// what the members are asked.
type memberSelectors struct {
	// mounts selects members by name (requirements on MountLabel).
	mounts labels.Selector
	// labelSelector is the rest of the label selector, for the members.
	labelSelector string
	// names maps a mount to the metadata.name its objects must have (fieldSelector
	// metadata.name=<mount>:<name>); fieldSelector is the rest.
	names map[string]string
	// notNames maps a mount to the names its objects must not have (fieldSelector
	// metadata.name!=<mount>:<name>): only that member is asked to leave them out.
	notNames      map[string][]string
	fieldSelector string
	// none: the selectors select nothing (two different names).
	none bool
}

// splitSelectors splits labelSelector and fieldSelector: requirements on the mount label select
// members; metadata.name=<mount>:<name> selects the member and asks it for <name>.
func splitSelectors(query url.Values) (memberSelectors, error) {
	s := memberSelectors{mounts: labels.Everything()}
	if text := query.Get("labelSelector"); text != "" {
		sel, err := labels.Parse(text)
		if err != nil {
			return s, fmt.Errorf("labelSelector: %w", err)
		}
		reqs, _ := sel.Requirements()
		mountSel, rest := labels.NewSelector(), labels.NewSelector()
		for _, r := range reqs {
			if r.Key() == MountLabel {
				mountSel = mountSel.Add(r)
			} else {
				rest = rest.Add(r)
			}
		}
		s.mounts, s.labelSelector = mountSel, rest.String()
	}
	if text := query.Get("fieldSelector"); text != "" {
		sel, err := fields.ParseSelector(text)
		if err != nil {
			return s, fmt.Errorf("fieldSelector: %w", err)
		}
		var rest []fields.Selector
		for _, r := range sel.Requirements() {
			if r.Field == "metadata.name" && (r.Operator == selection.Equals || r.Operator == selection.DoubleEquals) {
				if mount, name, ok := SplitName(r.Value); ok {
					if s.names != nil {
						if prev, ok := s.names[mount]; !ok || prev != name {
							s.none = true // one object cannot have two names
						}
						continue
					}
					s.names = map[string]string{mount: name}
					continue
				}
			}
			if r.Field == "metadata.name" && r.Operator == selection.NotEquals {
				// Another mount's objects never have this name: only its mount is asked.
				if mount, name, ok := SplitName(r.Value); ok {
					if s.notNames == nil {
						s.notNames = map[string][]string{}
					}
					s.notNames[mount] = append(s.notNames[mount], name)
					continue
				}
			}
			rest = append(rest, fields.OneTermEqualSelector(r.Field, r.Value))
			if r.Operator == selection.NotEquals {
				rest[len(rest)-1] = fields.OneTermNotEqualSelector(r.Field, r.Value)
			}
		}
		s.fieldSelector = fields.AndSelectors(rest...).String()
	}
	return s, nil
}

// selects says whether the member named mount takes part.
func (s memberSelectors) selects(mount string) bool {
	if s.none || !s.mounts.Matches(labels.Set{MountLabel: mount}) {
		return false
	}
	if s.names != nil {
		_, ok := s.names[mount]
		return ok
	}
	return true
}

// fieldSelectorFor is the field selector the member named mount is asked.
func (s memberSelectors) fieldSelectorFor(mount string) string {
	var terms []string
	if s.fieldSelector != "" {
		terms = append(terms, s.fieldSelector)
	}
	for _, name := range s.notNames[mount] {
		terms = append(terms, fields.OneTermNotEqualSelector("metadata.name", name).String())
	}
	if name, ok := s.names[mount]; ok {
		terms = append(terms, fields.OneTermEqualSelector("metadata.name", name).String())
	}
	return strings.Join(terms, ",")
}
