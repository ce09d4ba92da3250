package fanout

import (
	"reflect"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func resource(name string, scope apidiscoveryv2.ResourceScope, verbs ...string) apidiscoveryv2.APIResourceDiscovery {
	return apidiscoveryv2.APIResourceDiscovery{Resource: name, Scope: scope, Verbs: verbs, ResponseKind: &metav1.GroupVersionKind{Kind: name},
		Subresources: []apidiscoveryv2.APISubresourceDiscovery{{Subresource: "status"}}}
}

// TestIntersectAggregated: what every member serves, with the verbs of a fan-out that all
// have, and no subresources.
func TestIntersectAggregated(t *testing.T) {
	a := &apidiscoveryv2.APIGroupDiscoveryList{Items: []apidiscoveryv2.APIGroupDiscovery{
		{ObjectMeta: metav1.ObjectMeta{Name: "apps"}, Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Resources: []apidiscoveryv2.APIResourceDiscovery{
			resource("deployments", apidiscoveryv2.ScopeNamespace, "get", "list", "watch", "create"),
			resource("statefulsets", apidiscoveryv2.ScopeNamespace, "get", "list"),
			resource("onlyhere", apidiscoveryv2.ScopeNamespace, "list"),
		}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "example.com"}, Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1"}}},
	}}
	b := &apidiscoveryv2.APIGroupDiscoveryList{Items: []apidiscoveryv2.APIGroupDiscovery{
		{ObjectMeta: metav1.ObjectMeta{Name: "apps"}, Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1", Freshness: apidiscoveryv2.DiscoveryFreshnessStale, Resources: []apidiscoveryv2.APIResourceDiscovery{
			resource("statefulsets", apidiscoveryv2.ScopeNamespace, "list", "watch"),
			resource("deployments", apidiscoveryv2.ScopeNamespace, "list", "watch", "delete"),
		}}}},
	}}
	got := intersectAggregated([]*apidiscoveryv2.APIGroupDiscoveryList{a, b})
	if len(got.Items) != 1 || got.Items[0].Name != "apps" {
		t.Fatalf("groups: %+v", got.Items)
	}
	v := got.Items[0].Versions[0]
	if v.Freshness != apidiscoveryv2.DiscoveryFreshnessStale {
		t.Errorf("freshness %s", v.Freshness)
	}
	var names []string
	for _, r := range v.Resources {
		names = append(names, r.Resource)
		if r.Subresources != nil {
			t.Errorf("%s keeps subresources", r.Resource)
		}
	}
	if !reflect.DeepEqual(names, []string{"deployments", "statefulsets"}) {
		t.Errorf("resources %v", names)
	}
	if !reflect.DeepEqual(v.Resources[0].Verbs, []string{"list", "watch"}) || !reflect.DeepEqual(v.Resources[1].Verbs, []string{"list"}) {
		t.Errorf("verbs %v %v", v.Resources[0].Verbs, v.Resources[1].Verbs)
	}
}

// TestIntersectLegacy: /api, /apis and resource lists.
func TestIntersectLegacy(t *testing.T) {
	if got := intersectVersions([]*metav1.APIVersions{{Versions: []string{"v1", "v2"}}, {Versions: []string{"v2", "v1"}}, {Versions: []string{"v1"}}}); !reflect.DeepEqual(got.Versions, []string{"v1"}) {
		t.Errorf("versions %v", got.Versions)
	}
	gv := func(g, v string) metav1.GroupVersionForDiscovery {
		return metav1.GroupVersionForDiscovery{GroupVersion: g + "/" + v, Version: v}
	}
	groups := intersectGroups([]*metav1.APIGroupList{
		{Groups: []metav1.APIGroup{{Name: "batch", Versions: []metav1.GroupVersionForDiscovery{gv("batch", "v1"), gv("batch", "v2")}, PreferredVersion: gv("batch", "v2")}, {Name: "only", Versions: []metav1.GroupVersionForDiscovery{gv("only", "v1")}}}},
		{Groups: []metav1.APIGroup{{Name: "batch", Versions: []metav1.GroupVersionForDiscovery{gv("batch", "v1")}, PreferredVersion: gv("batch", "v1")}}},
	})
	if len(groups.Groups) != 1 || groups.Groups[0].PreferredVersion != gv("batch", "v1") || len(groups.Groups[0].Versions) != 1 {
		t.Errorf("groups %+v", groups.Groups)
	}
	rl := intersectResources([]*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "pods", Namespaced: true, Kind: "Pod", Verbs: []string{"get", "list", "watch"}, ShortNames: []string{"po"}}, {Name: "pods/log", Kind: "Pod", Verbs: []string{"get"}}, {Name: "nodes", Kind: "Node", Verbs: []string{"list"}}}},
		{GroupVersion: "v1", APIResources: []metav1.APIResource{{Name: "pods", Namespaced: true, Kind: "Pod", Verbs: []string{"list", "watch"}, ShortNames: []string{"po"}}, {Name: "nodes", Namespaced: true, Kind: "Node", Verbs: []string{"list"}}}},
	})
	if len(rl.APIResources) != 1 || rl.APIResources[0].Name != "pods" || !reflect.DeepEqual([]string(rl.APIResources[0].Verbs), []string{"list", "watch"}) || !reflect.DeepEqual(rl.APIResources[0].ShortNames, []string{"po"}) {
		t.Errorf("resources %+v", rl.APIResources)
	}
}

// TestLegacyFromAggregated: a member's aggregated /apis answers the legacy one when another
// member serves no aggregated discovery.
func TestLegacyFromAggregated(t *testing.T) {
	a := &discoveryAnswer{aggregated: &apidiscoveryv2.APIGroupDiscoveryList{Items: []apidiscoveryv2.APIGroupDiscovery{
		{ObjectMeta: metav1.ObjectMeta{Name: ""}, Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "apps"}, Versions: []apidiscoveryv2.APIVersionDiscovery{{Version: "v1"}, {Version: "v1beta1"}}},
	}}}
	if v := a.legacyVersions(); !reflect.DeepEqual(v.Versions, []string{"v1"}) {
		t.Errorf("versions %v", v.Versions)
	}
	g := a.legacyGroups()
	if len(g.Groups) != 2 || g.Groups[1].PreferredVersion.Version != "v1" || len(g.Groups[1].Versions) != 2 {
		t.Errorf("groups %+v", g.Groups)
	}
}

func TestAcceptsAggregated(t *testing.T) {
	if !acceptsAggregated("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json") {
		t.Error("kubectl's Accept")
	}
	if acceptsAggregated("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json") {
		t.Error("v2beta1 only")
	}
}
