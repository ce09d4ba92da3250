package v1alpha1

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
)

func TestSetDefaultsMountSpec(t *testing.T) {
	tests := []struct {
		name string
		in   MountSpec
		want MountSpec
	}{
		{"empty becomes a URL mount of a Secret",
			MountSpec{Ref: ObjectReference{Namespace: "a", Name: "b"}},
			MountSpec{Type: MountTypeURL, Ref: ObjectReference{APIVersion: "v1", Kind: "Secret", Namespace: "a", Name: "b"}, Identity: MountIdentity{Mode: IdentityModeImpersonate}}},
		{"Workspace gets the Workspace kind",
			MountSpec{Type: MountTypeWorkspace, Ref: ObjectReference{Name: "root:a"}},
			MountSpec{Type: MountTypeWorkspace, Ref: ObjectReference{APIVersion: WorkspaceAPIVersion, Kind: "Workspace", Name: "root:a"}, Identity: MountIdentity{Mode: IdentityModeImpersonate}}},
		{"Redirect gets the Workspace kind",
			MountSpec{Type: MountTypeRedirect, Ref: ObjectReference{Name: "root:a"}},
			MountSpec{Type: MountTypeRedirect, Ref: ObjectReference{APIVersion: WorkspaceAPIVersion, Kind: "Workspace", Name: "root:a"}, Identity: MountIdentity{Mode: IdentityModeImpersonate}}},
		{"explicit values stay",
			MountSpec{Type: MountTypeURL, Ref: ObjectReference{APIVersion: "v9", Kind: "ConfigMap"}, Identity: MountIdentity{Mode: IdentityModeMountCredentials}},
			MountSpec{Type: MountTypeURL, Ref: ObjectReference{APIVersion: "v9", Kind: "ConfigMap"}, Identity: MountIdentity{Mode: IdentityModeMountCredentials}}},
		{"a foreign kind gets no apiVersion",
			MountSpec{Ref: ObjectReference{Kind: "ConfigMap"}},
			MountSpec{Type: MountTypeURL, Ref: ObjectReference{Kind: "ConfigMap"}, Identity: MountIdentity{Mode: IdentityModeImpersonate}}},
		{"an unknown type defaults no reference",
			MountSpec{Type: "Bogus"},
			MountSpec{Type: "Bogus", Identity: MountIdentity{Mode: IdentityModeImpersonate}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in
			SetDefaults_MountSpec(&got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("defaults (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFieldLabelConversion(t *testing.T) {
	s := runtimeScheme(t)
	for _, label := range []string{"metadata.name", "spec.type", "status.phase"} {
		if _, _, err := s.ConvertFieldLabel(SchemeGroupVersion.WithKind("Mount"), label, "x"); err != nil {
			t.Errorf("%s: %v", label, err)
		}
	}
	if _, _, err := s.ConvertFieldLabel(SchemeGroupVersion.WithKind("Mount"), "spec.ref.name", "x"); err == nil {
		t.Error("spec.ref.name: expected an error")
	}
}
func runtimeScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}
