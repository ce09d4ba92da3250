package status

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
	"github.com/kcp-dev/mount-apiserver/pkg/kcp"
)

// workspaces is a kcp.WorkspaceResolver over a map: a test double of our own interface (the
// resolver over kcp is tested with it).
type workspaces map[string]kcp.Workspace

func (w workspaces) ResolveWorkspace(_ context.Context, path string) (kcp.Workspace, error) {
	if path == "root:broken" {
		return kcp.Workspace{}, errors.New("connection refused")
	}
	ws, ok := w[path]
	if !ok {
		return kcp.Workspace{}, apierrors.NewNotFound(schema.GroupResource{Group: "tenancy.kcp.io", Resource: "workspaces"}, path)
	}
	return ws, nil
}

func TestWorkspaceStatus(t *testing.T) {
	now := metav1.NewTime(time.Unix(1000, 0))
	resolver := workspaces{
		"root:org:team": {Path: "root:org:team", Cluster: "2x7kq3n1", URL: "https://kcp.example/clusters/2x7kq3n1", Ready: true},
		"root:org:new":  {Path: "root:org:new", Cluster: "8a9b", URL: "https://kcp.example/clusters/8a9b", Message: "initializers pending"},
	}
	resolve := func(m *v1alpha1.Mount) v1alpha1.MountStatus {
		ws, err := resolver.ResolveWorkspace(context.Background(), m.Spec.Ref.Name)
		return workspaceStatus(m, ws, err, now)
	}
	for _, typ := range []v1alpha1.MountType{v1alpha1.MountTypeWorkspace, v1alpha1.MountTypeRedirect} {
		m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "m", Generation: 2},
			Spec: v1alpha1.MountSpec{Type: typ, Ref: v1alpha1.ObjectReference{Name: "root:org:team"}}}
		m.Status.Phase = v1alpha1.MountPhaseInitializing

		s := resolve(m)
		if s.Phase != v1alpha1.MountPhaseReady || s.URL != "https://kcp.example/clusters/2x7kq3n1" || s.ObservedGeneration != 2 {
			t.Errorf("%s, ready workspace: phase %s URL %q generation %d", typ, s.Phase, s.URL, s.ObservedGeneration)
		}
		for _, c := range s.Conditions {
			if c.Status != metav1.ConditionTrue {
				t.Errorf("%s, ready workspace: condition %+v", typ, c)
			}
		}
		m.Status = s
		if again := workspaceStatus(m, resolver["root:org:team"], nil, metav1.NewTime(time.Unix(2000, 0))); !equalStatus(again, m.Status) {
			t.Errorf("%s: an unchanged workspace changed the status", typ)
		}

		m.Spec.Ref.Name = "root:org:new"
		s = resolve(m)
		c := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady)
		if s.Phase != v1alpha1.MountPhaseConnecting || s.URL != "https://kcp.example/clusters/8a9b" || c.Reason != ReasonWorkspaceNotReady || !strings.Contains(c.Message, "initializers pending") {
			t.Errorf("%s, workspace not ready: phase %s URL %q Ready %+v", typ, s.Phase, s.URL, c)
		}

		m.Spec.Ref.Name = "root:org:gone"
		s = resolve(m)
		c = meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady)
		if s.Phase != v1alpha1.MountPhaseConnecting || s.URL != "" || c.Reason != ReasonWorkspaceNotFound || !strings.Contains(c.Message, `"root:org:gone" does not exist`) {
			t.Errorf("%s, no workspace: phase %s URL %q Ready %+v", typ, s.Phase, s.URL, c)
		}
		if cr := meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionCredentialsResolved); cr.Status != metav1.ConditionFalse {
			t.Errorf("%s, no workspace: CredentialsResolved %+v", typ, cr)
		}

		// kcp unreachable: not ready, and the last URL stays.
		m.Spec.Ref.Name = "root:org:team"
		m.Status = resolve(m)
		m.Spec.Ref.Name = "root:broken"
		s = resolve(m)
		c = meta.FindStatusCondition(s.Conditions, v1alpha1.ConditionReady)
		if s.Phase != v1alpha1.MountPhaseConnecting || s.URL != "https://kcp.example/clusters/2x7kq3n1" || c.Reason != ReasonWorkspaceUnresolved {
			t.Errorf("%s, kcp unreachable: phase %s URL %q Ready %+v", typ, s.Phase, s.URL, c)
		}
	}
}

func TestClusterKeysAndURLs(t *testing.T) {
	plain := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "m"}}
	inCluster := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{kcp.ClusterAnnotation: "ws-a"}}}
	recordCluster(plain)
	recordCluster(inCluster)
	if Key(plain) != "m" || ClusterOf(plain) != clusters.DefaultCluster {
		t.Errorf("default cluster: key %q cluster %q", Key(plain), ClusterOf(plain))
	}
	if Key(inCluster) != "ws-a/m" || ClusterOf(inCluster) != "ws-a" {
		t.Errorf("logical cluster: key %q cluster %q", Key(inCluster), ClusterOf(inCluster))
	}
	const base = "https://fp.example/services/mounts"
	if got := ClusterProxyURL(base, clusters.DefaultCluster, "m"); got != base+"/apis/mounts.kcp.io/v1alpha1/mounts/m/proxy" {
		t.Errorf("default cluster URL %q", got)
	}
	if got := ClusterProxyURL(base, "ws-a", "m"); got != base+"/clusters/ws-a/apis/mounts.kcp.io/v1alpha1/mounts/m/proxy" {
		t.Errorf("logical cluster URL %q", got)
	}
}
