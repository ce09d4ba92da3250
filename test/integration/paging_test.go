package integration

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// TestPagedListsAreConsistent: every page of a paginated LIST shows the state of the first,
// also when Mounts are created and deleted between pages (later pages are read from etcd at
// the first page's revision: ListFromCacheSnapshot is off).
func TestPagedListsAreConsistent(t *testing.T) {
	ctx := context.Background()
	s := framework.StartInProcess(t, "", apiOnly)
	mounts := s.Client.MountsV1alpha1().Mounts()
	for i := range 7 {
		if _, err := mounts.Create(ctx, urlMount(fmt.Sprintf("p-%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	page := func(cont string) *v1alpha1.MountList {
		t.Helper()
		l, err := mounts.List(ctx, metav1.ListOptions{Limit: 3, Continue: cont})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	names := func(l *v1alpha1.MountList) (n []string) {
		for _, m := range l.Items {
			n = append(n, m.Name)
		}
		return n
	}
	remaining := func(l *v1alpha1.MountList) int64 {
		if l.RemainingItemCount == nil {
			return -1
		}
		return *l.RemainingItemCount
	}

	// Nothing written between pages.
	first := page("")
	second := page(first.Continue)
	third := page(second.Continue)
	got := [][]string{names(first), names(second), names(third)}
	want := [][]string{{"p-0", "p-1", "p-2"}, {"p-3", "p-4", "p-5"}, {"p-6"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pages: %s", diff)
	}
	if remaining(first) != 4 || remaining(second) != 1 || third.Continue != "" || third.RemainingItemCount != nil {
		t.Errorf("remaining items %d, %d, last continue %q", remaining(first), remaining(second), third.Continue)
	}
	if second.ResourceVersion != first.ResourceVersion || third.ResourceVersion != first.ResourceVersion {
		t.Errorf("resourceVersions of the pages: %s, %s, %s", first.ResourceVersion, second.ResourceVersion, third.ResourceVersion)
	}

	// Writes between pages: the later pages still show the first page's state.
	first = page("")
	if _, err := mounts.Create(ctx, urlMount("p-3a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := mounts.Delete(ctx, "p-5", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The cache has seen the writes before the next page is asked for.
	if _, err := mounts.List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	second = page(first.Continue)
	third = page(second.Continue)
	got = [][]string{names(first), names(second), names(third)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pages across writes: %s", diff)
	}
	if now := page(""); !cmp.Equal(names(now), []string{"p-0", "p-1", "p-2"}) || remaining(now) != 4 {
		t.Errorf("after the writes: %v, %d more", names(now), remaining(now))
	}

	// A write between the second and the third page.
	first = page("")
	second = page(first.Continue)
	if _, err := mounts.Create(ctx, urlMount("p-6a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := mounts.List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	third = page(second.Continue)
	got = [][]string{names(first), names(second), names(third)}
	want = [][]string{{"p-0", "p-1", "p-2"}, {"p-3", "p-3a", "p-4"}, {"p-6"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pages across a write before the last: %s", diff)
	}

	// A field selector pages the matching Mounts only, without a count, as etcd does.
	var sel []string
	cont := ""
	for {
		l, err := mounts.List(ctx, metav1.ListOptions{Limit: 2, Continue: cont, FieldSelector: "metadata.name!=p-1"})
		if err != nil {
			t.Fatal(err)
		}
		if l.Continue != "" && l.RemainingItemCount != nil {
			t.Errorf("a page with a selector counts %d remaining items", *l.RemainingItemCount)
		}
		sel = append(sel, names(l)...)
		if cont = l.Continue; cont == "" {
			break
		}
	}
	if want := []string{"p-0", "p-2", "p-3", "p-3a", "p-4", "p-6", "p-6a"}; !cmp.Equal(sel, want) {
		t.Errorf("pages with a field selector: %v, want %v", sel, want)
	}
}

// TestPagedListsInLogicalClusters: in kcp mode, pages of one logical cluster and of the
// wildcard (keys <cluster>/<name>) come in etcd's order, each Mount once.
func TestPagedListsInLogicalClusters(t *testing.T) {
	ctx := context.Background()
	s := framework.StartInProcess(t, "", kcpAPIOnly)
	clientAt := func(cluster string) clientset.Interface {
		c := rest.CopyConfig(s.Config)
		c.Host = s.URL + "/clusters/" + cluster
		client, err := clientset.NewForConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		return client
	}
	for _, cluster := range []string{"ws-b", "ws-a", "ws-c"} {
		for _, name := range []string{"y", "x", "z"} {
			m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.MountSpec{Type: v1alpha1.MountTypeWorkspace, Ref: v1alpha1.ObjectReference{Name: "root:team"}}}
			if _, err := clientAt(cluster).MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for cluster, want := range map[string][]string{
		"ws-a": {"x@ws-a", "y@ws-a", "z@ws-a"},
		"*":    {"x@ws-a", "y@ws-a", "z@ws-a", "x@ws-b", "y@ws-b", "z@ws-b", "x@ws-c", "y@ws-c", "z@ws-c"},
	} {
		var got []string
		cont := ""
		for {
			l, err := clientAt(cluster).MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{Limit: 2, Continue: cont})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range l.Items {
				got = append(got, m.Name+"@"+m.Annotations["kcp.io/cluster"])
			}
			if cont = l.Continue; cont == "" {
				break
			}
		}
		if !cmp.Equal(got, want) {
			t.Errorf("pages of %s: %v, want %v", cluster, got, want)
		}
	}
}
