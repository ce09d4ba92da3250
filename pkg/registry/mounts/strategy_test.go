package mounts

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

func testMount() *mounts.Mount {
	return &mounts.Mount{
		ObjectMeta: metav1.ObjectMeta{Name: "prod", ResourceVersion: "1", Generation: 4, Labels: map[string]string{"env": "prod"}},
		Spec: mounts.MountSpec{
			Type:     mounts.MountTypeURL,
			Ref:      mounts.ObjectReference{APIVersion: "v1", Kind: "Secret", Namespace: "prod", Name: "kubeconfig"},
			Identity: mounts.MountIdentity{Mode: mounts.IdentityModeImpersonate},
		},
		Status: mounts.MountStatus{Phase: mounts.MountPhaseReady, URL: "https://x/", ObservedGeneration: 4},
	}
}

func TestPrepareForCreate(t *testing.T) {
	s := NewStrategy(runtime.NewScheme())
	m := testMount()
	m.Status = mounts.MountStatus{Phase: mounts.MountPhaseReady, URL: "https://elsewhere", ObservedGeneration: 7}
	s.PrepareForCreate(context.Background(), m)
	if m.Status.Phase != mounts.MountPhaseInitializing || m.Status.URL != "" || m.Status.ObservedGeneration != 0 {
		t.Errorf("status on create: %+v, want Initializing and nothing else set", m.Status)
	}
	if len(m.Status.Conditions) != 3 {
		t.Errorf("conditions on create: %+v", m.Status.Conditions)
	}
	for _, c := range m.Status.Conditions {
		if c.Status != metav1.ConditionUnknown || c.Reason != ReasonNotChecked || c.LastTransitionTime.IsZero() {
			t.Errorf("condition on create: %+v", c)
		}
	}
	if errs := s.Validate(context.Background(), m); len(errs) != 0 {
		t.Errorf("the initial status does not validate: %v", errs)
	}
	if m.Generation != 1 {
		t.Errorf("generation = %d, want 1", m.Generation)
	}
}

func TestPrepareForUpdate(t *testing.T) {
	s := NewStrategy(runtime.NewScheme())
	ctx := context.Background()

	old := testMount()
	same := testMount()
	same.Status = mounts.MountStatus{Phase: mounts.MountPhaseUnknown}
	same.Labels = map[string]string{"env": "staging"}
	s.PrepareForUpdate(ctx, same, old)
	if same.Status.Phase != mounts.MountPhaseReady {
		t.Errorf("status changed through the main resource: %+v", same.Status)
	}
	if same.Generation != 4 {
		t.Errorf("generation bumped without a spec change: %d", same.Generation)
	}
	if same.Labels["env"] != "staging" {
		t.Error("label change lost")
	}

	changed := testMount()
	changed.Spec.Type = mounts.MountTypeWorkspace
	s.PrepareForUpdate(ctx, changed, old)
	if changed.Generation != 5 {
		t.Errorf("generation = %d after a spec change, want 5", changed.Generation)
	}
}

func TestStatusPrepareForUpdate(t *testing.T) {
	s := NewStatusStrategy(NewStrategy(runtime.NewScheme()))
	old := testMount()
	m := testMount()
	m.Spec.Type = mounts.MountTypeRedirect
	m.Labels = map[string]string{"env": "hacked"}
	m.Annotations = map[string]string{"a": "b"}
	m.Status.Phase = mounts.MountPhaseUnknown
	s.PrepareForUpdate(context.Background(), m, old)
	if m.Spec.Type != mounts.MountTypeURL {
		t.Error("spec changed through status")
	}
	if m.Labels["env"] != "prod" || len(m.Annotations) != 0 {
		t.Errorf("metadata changed through status: %v %v", m.Labels, m.Annotations)
	}
	if m.Status.Phase != mounts.MountPhaseUnknown {
		t.Error("status change lost")
	}
	if errs := s.ValidateUpdate(context.Background(), m, old); len(errs) != 0 {
		t.Errorf("valid status update refused: %v", errs)
	}
	m.Status.Phase = "Bogus"
	if errs := s.ValidateUpdate(context.Background(), m, old); len(errs) != 1 || errs[0].Field != "status.phase" {
		t.Errorf("invalid status accepted or wrong field: %v", errs)
	}
}

func TestResetFields(t *testing.T) {
	s := NewStrategy(runtime.NewScheme())
	for _, set := range s.GetResetFields() {
		if set.String() != ".status" {
			t.Errorf("main resource resets %s, want .status", set.String())
		}
	}
	for _, set := range NewStatusStrategy(s).GetResetFields() {
		for _, want := range []string{".spec", ".metadata.labels", ".metadata.annotations"} {
			found := false
			set.Iterate(func(p fieldpath.Path) {
				if p.String() == want {
					found = true
				}
			})
			if !found {
				t.Errorf("status subresource does not reset %s: %s", want, set.String())
			}
		}
	}
}

func TestWarnings(t *testing.T) {
	s := NewStrategy(runtime.NewScheme())
	m := testMount()
	if w := s.WarningsOnCreate(context.Background(), m); len(w) != 0 {
		t.Errorf("unexpected warnings: %v", w)
	}
	m.Spec.Identity.Mode = mounts.IdentityModeMountCredentials
	if w := s.WarningsOnCreate(context.Background(), m); len(w) != 1 {
		t.Errorf("expected one warning for MountCredentials, got %v", w)
	}
}

func TestMatch(t *testing.T) {
	m := testMount()
	for sel, want := range map[string]bool{
		"spec.type=URL":                    true,
		"spec.type=Workspace":              false,
		"status.phase=Ready":               true,
		"status.phase!=Ready":              false,
		"metadata.name=prod":               true,
		"metadata.name=prod,spec.type=URL": true,
	} {
		p := Match(labels.Everything(), fields.ParseSelectorOrDie(sel))
		got, err := p.Matches(m)
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		if got != want {
			t.Errorf("%s matches = %v, want %v", sel, got, want)
		}
	}
	byLabel := Match(labels.SelectorFromSet(labels.Set{"env": "dev"}), fields.Everything())
	if ok, _ := byLabel.Matches(m); ok {
		t.Error("label selector env=dev matched env=prod")
	}
	if _, _, err := GetAttrs(&mounts.MountList{}); err == nil {
		t.Error("GetAttrs accepted a list")
	}
}
