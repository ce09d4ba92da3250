package fanout

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// maxDiscoveryBytes bounds one member's discovery document.
const maxDiscoveryBytes = 16 << 20

// aggregatedV2 is the media type of aggregated discovery.
const aggregatedV2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// servedVerbs are the verbs a fan-out serves; discovery offers no others.
var servedVerbs = []string{"list", "watch"}

// discoveryAnswer is one member's discovery document.
type discoveryAnswer struct {
	aggregated *apidiscoveryv2.APIGroupDiscoveryList
	versions   *metav1.APIVersions
	groups     *metav1.APIGroupList
	group      *metav1.APIGroup
	resources  *metav1.APIResourceList
	// notFound: the member answered 404 (it does not serve the path).
	notFound bool
	err      *memberError
}

// serveDiscovery answers /api, /apis, /api/<v>, /apis/<g>[/<v>] with what every member that
// answered serves: the groups, versions and resources they have in common, with the verbs of
// a fan-out (list, watch) they have in common, no subresources. Aggregated discovery when the
// caller accepts it and every member serves it (kcp serves none: then the legacy documents).
func (f *fanout) serveDiscovery(w http.ResponseWriter) {
	ctx := f.req.Context()
	root := f.r.path == "/api" || f.r.path == "/apis"
	accept := "application/json"
	if root && acceptsAggregated(f.accept) {
		accept = aggregatedV2 + ",application/json"
	}
	answers := make([]*discoveryAnswer, len(f.members))
	sem := make(chan struct{}, f.server.maxConcurrency())
	var wg sync.WaitGroup
	for i, m := range f.members {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			answers[i] = f.discover(ctx, m, accept)
		}()
	}
	wg.Wait()
	failed := map[string]*memberError{}
	var ok []*discoveryAnswer
	notFound := 0
	for i, a := range answers {
		switch {
		case a.err != nil:
			failed[f.members[i].name] = a.err
		case a.notFound:
			notFound++
		default:
			ok = append(ok, a)
		}
	}
	if notFound > 0 {
		// What one member does not serve, the members do not serve in common.
		warn(ctx, failed)
		writeStatus(w, newStatus(http.StatusNotFound, metav1.StatusReasonNotFound, fmt.Sprintf(
			"the server could not find the requested resource (%s is not served by %d of the mounts)", f.r.path, notFound)))
		return
	}
	if len(ok) == 0 {
		allFailed(w, failed)
		return
	}
	warn(ctx, failed)
	aggregated := true
	for _, a := range ok {
		if a.aggregated == nil {
			aggregated = false
		}
	}
	var doc any
	contentType := "application/json"
	switch {
	case aggregated:
		lists := make([]*apidiscoveryv2.APIGroupDiscoveryList, len(ok))
		for i, a := range ok {
			lists[i] = a.aggregated
		}
		doc, contentType = intersectAggregated(lists), aggregatedV2
	case f.r.path == "/api":
		doc = intersectVersions(legacyAll(ok, func(a *discoveryAnswer) *metav1.APIVersions { return a.legacyVersions() }))
	case f.r.path == "/apis":
		doc = intersectGroups(legacyAll(ok, func(a *discoveryAnswer) *metav1.APIGroupList { return a.legacyGroups() }))
	default:
		var err *memberError
		if doc, err = f.intersectPath(ok); err != nil {
			writeStatus(w, newStatus(int32(err.code), reasonFor(err.code), err.message))
			return
		}
	}
	data, err := json.Marshal(doc)
	if err != nil {
		writeStatus(w, newStatus(http.StatusInternalServerError, metav1.StatusReasonInternalError, err.Error()))
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func (f *fanout) intersectPath(ok []*discoveryAnswer) (any, *memberError) {
	parts := strings.Split(strings.TrimPrefix(f.r.path, "/"), "/")
	switch {
	case len(parts) == 2 && parts[0] == "apis":
		var groups []*metav1.APIGroup
		for _, a := range ok {
			if a.group == nil {
				return nil, &memberError{code: http.StatusBadGateway, message: "a mount answered no APIGroup"}
			}
			groups = append(groups, a.group)
		}
		return intersectGroup(groups), nil
	default:
		var lists []*metav1.APIResourceList
		for _, a := range ok {
			if a.resources == nil {
				return nil, &memberError{code: http.StatusBadGateway, message: "a mount answered no APIResourceList"}
			}
			lists = append(lists, a.resources)
		}
		return intersectResources(lists), nil
	}
}

func legacyAll[T any](answers []*discoveryAnswer, get func(*discoveryAnswer) *T) []*T {
	var out []*T
	for _, a := range answers {
		if v := get(a); v != nil {
			out = append(out, v)
		}
	}
	return out
}

// acceptsAggregated says whether the caller accepts aggregated discovery v2.
func acceptsAggregated(accept string) bool {
	for entry := range strings.SplitSeq(accept, ",") {
		_, params, err := mime.ParseMediaType(strings.TrimSpace(entry))
		if err == nil && params["g"] == "apidiscovery.k8s.io" && params["v"] == "v2" && params["as"] == "APIGroupDiscoveryList" {
			return true
		}
	}
	return false
}

// discover asks one member for its discovery document at the request's path.
func (f *fanout) discover(ctx context.Context, m *member, accept string) *discoveryAnswer {
	timeout := f.server.memberTimeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := f.send(ctx, m, f.r.path, url.Values{}, accept)
	if err != nil {
		return &discoveryAnswer{err: failure(f.req.Context(), err, timeout)}
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return &discoveryAnswer{notFound: true}
	}
	if resp.StatusCode != http.StatusOK {
		return &discoveryAnswer{err: errorOf(resp)}
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxDiscoveryBytes+1))
	if err != nil {
		return &discoveryAnswer{err: failure(f.req.Context(), err, timeout)}
	}
	if len(data) > maxDiscoveryBytes {
		return &discoveryAnswer{err: &memberError{code: http.StatusBadGateway, message: fmt.Sprintf("its discovery document is larger than %d bytes", maxDiscoveryBytes)}}
	}
	a := &discoveryAnswer{}
	var kind struct {
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(data, &kind); err != nil {
		return &discoveryAnswer{err: &memberError{code: http.StatusBadGateway, message: "its discovery document is not JSON"}}
	}
	var target any
	switch kind.Kind {
	case "APIGroupDiscoveryList":
		a.aggregated = &apidiscoveryv2.APIGroupDiscoveryList{}
		target = a.aggregated
		if _, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); params["v"] != "v2" {
			return &discoveryAnswer{err: &memberError{code: http.StatusBadGateway, message: "it answered aggregated discovery in a version other than v2"}}
		}
	case "APIVersions":
		a.versions = &metav1.APIVersions{}
		target = a.versions
	case "APIGroupList":
		a.groups = &metav1.APIGroupList{}
		target = a.groups
	case "APIGroup":
		a.group = &metav1.APIGroup{}
		target = a.group
	case "APIResourceList":
		a.resources = &metav1.APIResourceList{}
		target = a.resources
	default:
		return &discoveryAnswer{err: &memberError{code: http.StatusBadGateway, message: fmt.Sprintf("it answered a %q, no discovery document", kind.Kind)}}
	}
	if err := json.Unmarshal(data, target); err != nil {
		return &discoveryAnswer{err: &memberError{code: http.StatusBadGateway, message: "its discovery document does not decode: " + err.Error()}}
	}
	return a
}

// legacyVersions is the member's /api as APIVersions.
func (a *discoveryAnswer) legacyVersions() *metav1.APIVersions {
	if a.versions != nil {
		return a.versions
	}
	if a.aggregated == nil {
		return nil
	}
	v := &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}}
	for _, g := range a.aggregated.Items {
		if g.Name == "" {
			for _, ver := range g.Versions {
				v.Versions = append(v.Versions, ver.Version)
			}
		}
	}
	return v
}

// legacyGroups is the member's /apis as APIGroupList.
func (a *discoveryAnswer) legacyGroups() *metav1.APIGroupList {
	if a.groups != nil {
		return a.groups
	}
	if a.aggregated == nil {
		return nil
	}
	l := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}}
	for _, g := range a.aggregated.Items {
		group := metav1.APIGroup{Name: g.Name}
		for i, ver := range g.Versions {
			gv := metav1.GroupVersionForDiscovery{GroupVersion: g.Name + "/" + ver.Version, Version: ver.Version}
			group.Versions = append(group.Versions, gv)
			if i == 0 {
				group.PreferredVersion = gv
			}
		}
		l.Groups = append(l.Groups, group)
	}
	return l
}

// intersectVersions intersects /api documents.
func intersectVersions(docs []*metav1.APIVersions) *metav1.APIVersions {
	out := &metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{}, ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{}}
	if len(docs) == 0 {
		return out
	}
	for _, v := range docs[0].Versions {
		if all(docs[1:], func(d *metav1.APIVersions) bool { return slices.Contains(d.Versions, v) }) {
			out.Versions = append(out.Versions, v)
		}
	}
	return out
}

// intersectGroups intersects /apis documents.
func intersectGroups(docs []*metav1.APIGroupList) *metav1.APIGroupList {
	out := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	if len(docs) == 0 {
		return out
	}
	for _, g := range docs[0].Groups {
		var same []*metav1.APIGroup
		for _, d := range docs {
			i := slices.IndexFunc(d.Groups, func(o metav1.APIGroup) bool { return o.Name == g.Name })
			if i < 0 {
				break
			}
			same = append(same, &d.Groups[i])
		}
		if len(same) == len(docs) {
			if common := intersectGroup(same); len(common.Versions) > 0 {
				common.TypeMeta = metav1.TypeMeta{}
				out.Groups = append(out.Groups, *common)
			}
		}
	}
	return out
}

// intersectGroup intersects the versions of one group.
func intersectGroup(groups []*metav1.APIGroup) *metav1.APIGroup {
	out := &metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: groups[0].Name, Versions: []metav1.GroupVersionForDiscovery{}}
	for _, v := range groups[0].Versions {
		if all(groups[1:], func(g *metav1.APIGroup) bool {
			return slices.ContainsFunc(g.Versions, func(o metav1.GroupVersionForDiscovery) bool { return o.Version == v.Version })
		}) {
			out.Versions = append(out.Versions, v)
		}
	}
	if slices.ContainsFunc(out.Versions, func(v metav1.GroupVersionForDiscovery) bool { return v == groups[0].PreferredVersion }) {
		out.PreferredVersion = groups[0].PreferredVersion
	} else if len(out.Versions) > 0 {
		out.PreferredVersion = out.Versions[0]
	}
	return out
}

// intersectResources intersects the resources of one group version.
func intersectResources(lists []*metav1.APIResourceList) *metav1.APIResourceList {
	out := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: lists[0].GroupVersion, APIResources: []metav1.APIResource{}}
	for _, r := range lists[0].APIResources {
		if strings.Contains(r.Name, "/") {
			continue // subresources are one object's
		}
		common := r
		common.Verbs = intersectStrings(servedVerbs, r.Verbs)
		keep := true
		for _, l := range lists[1:] {
			i := slices.IndexFunc(l.APIResources, func(o metav1.APIResource) bool { return o.Name == r.Name })
			if i < 0 || l.APIResources[i].Namespaced != r.Namespaced || l.APIResources[i].Kind != r.Kind {
				keep = false
				break
			}
			o := l.APIResources[i]
			common.Verbs = intersectStrings(common.Verbs, o.Verbs)
			common.ShortNames = intersectStrings(common.ShortNames, o.ShortNames)
			common.Categories = intersectStrings(common.Categories, o.Categories)
		}
		if keep && len(common.Verbs) > 0 {
			common.StorageVersionHash = ""
			out.APIResources = append(out.APIResources, common)
		}
	}
	return out
}

// intersectAggregated intersects aggregated discovery documents.
func intersectAggregated(lists []*apidiscoveryv2.APIGroupDiscoveryList) *apidiscoveryv2.APIGroupDiscoveryList {
	out := &apidiscoveryv2.APIGroupDiscoveryList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2"}, Items: []apidiscoveryv2.APIGroupDiscovery{}}
	for _, g := range lists[0].Items {
		group := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: g.Name}}
		for _, v := range g.Versions {
			version := apidiscoveryv2.APIVersionDiscovery{Version: v.Version, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent, Resources: []apidiscoveryv2.APIResourceDiscovery{}}
			others := make([]*apidiscoveryv2.APIVersionDiscovery, 0, len(lists)-1)
			for _, l := range lists[1:] {
				if o := findVersion(l, g.Name, v.Version); o != nil {
					others = append(others, o)
				}
			}
			if len(others) != len(lists)-1 {
				continue
			}
			if v.Freshness == apidiscoveryv2.DiscoveryFreshnessStale || slices.ContainsFunc(others, func(o *apidiscoveryv2.APIVersionDiscovery) bool {
				return o.Freshness == apidiscoveryv2.DiscoveryFreshnessStale
			}) {
				version.Freshness = apidiscoveryv2.DiscoveryFreshnessStale
			}
			for _, r := range v.Resources {
				common := r
				common.Subresources = nil
				common.Verbs = intersectStrings(servedVerbs, r.Verbs)
				keep := true
				for _, o := range others {
					i := slices.IndexFunc(o.Resources, func(x apidiscoveryv2.APIResourceDiscovery) bool { return x.Resource == r.Resource })
					if i < 0 || o.Resources[i].Scope != r.Scope {
						keep = false
						break
					}
					x := o.Resources[i]
					if r.ResponseKind != nil && x.ResponseKind != nil && x.ResponseKind.Kind != r.ResponseKind.Kind {
						keep = false
						break
					}
					common.Verbs = intersectStrings(common.Verbs, x.Verbs)
					common.ShortNames = intersectStrings(common.ShortNames, x.ShortNames)
					common.Categories = intersectStrings(common.Categories, x.Categories)
				}
				if keep && len(common.Verbs) > 0 {
					version.Resources = append(version.Resources, common)
				}
			}
			group.Versions = append(group.Versions, version)
		}
		if len(group.Versions) > 0 {
			out.Items = append(out.Items, group)
		}
	}
	return out
}

func findVersion(l *apidiscoveryv2.APIGroupDiscoveryList, group, version string) *apidiscoveryv2.APIVersionDiscovery {
	for i := range l.Items {
		if l.Items[i].Name != group {
			continue
		}
		for j := range l.Items[i].Versions {
			if l.Items[i].Versions[j].Version == version {
				return &l.Items[i].Versions[j]
			}
		}
	}
	return nil
}

// intersectStrings keeps a's strings that b has, in a's order; nil when none.
func intersectStrings(a, b []string) []string {
	var out []string
	for _, s := range a {
		if slices.Contains(b, s) {
			out = append(out, s)
		}
	}
	return out
}

func all[T any](xs []T, ok func(T) bool) bool {
	for _, x := range xs {
		if !ok(x) {
			return false
		}
	}
	return true
}
