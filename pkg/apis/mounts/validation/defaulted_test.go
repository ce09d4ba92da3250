package validation

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/install"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
)

// TestOneErrorPerMistake validates Mounts as users write them, defaulted and converted as the
// server does: each mistake in the reference is one error on the field that is wrong.
func TestOneErrorPerMistake(t *testing.T) {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	for _, c := range []struct {
		name string
		spec v1alpha1.MountSpec
		want []string
	}{
		{"ConfigMap for a URL mount", v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Kind: "ConfigMap", Namespace: "a", Name: "b"}},
			[]string{"FieldValueNotSupported spec.ref.kind"}},
		{"ConfigMap with its apiVersion", v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "b"}},
			[]string{"FieldValueNotSupported spec.ref.kind"}},
		{"Deployment with its apiVersion", v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "a", Name: "b"}},
			[]string{"FieldValueNotSupported spec.ref.kind"}},
		{"Secret for a Workspace mount", v1alpha1.MountSpec{Type: v1alpha1.MountTypeWorkspace, Ref: v1alpha1.ObjectReference{Kind: "Secret", Name: "root:a"}},
			[]string{"FieldValueNotSupported spec.ref.kind"}},
		{"Secret with a wrong apiVersion", v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{APIVersion: "v2", Namespace: "a", Name: "b"}},
			[]string{"FieldValueNotSupported spec.ref.apiVersion"}},
		{"wrong kind and no name", v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Kind: "ConfigMap", Namespace: "a"}},
			[]string{"FieldValueNotSupported spec.ref.kind", "FieldValueRequired spec.ref.name"}},
		{"defaults only", v1alpha1.MountSpec{Ref: v1alpha1.ObjectReference{Namespace: "a", Name: "b"}}, nil},
		{"tunnel defaults to Server credentials, which need a Secret", v1alpha1.MountSpec{Tunnel: &v1alpha1.MountTunnel{}},
			[]string{"FieldValueRequired spec.ref.namespace", "FieldValueRequired spec.ref.name"}},
		{"tunnel with Server credentials", v1alpha1.MountSpec{Tunnel: &v1alpha1.MountTunnel{}, Ref: v1alpha1.ObjectReference{Namespace: "a", Name: "b"}}, nil},
		{"tunnel with Agent credentials references nothing", v1alpha1.MountSpec{Tunnel: &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsAgent}}, nil},
		{"tunnel with Agent credentials and a Secret", v1alpha1.MountSpec{Tunnel: &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsAgent}, Ref: v1alpha1.ObjectReference{Namespace: "a", Name: "b"}},
			[]string{"FieldValueForbidden spec.ref"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			external := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: c.spec}
			scheme.Default(external)
			var internal mounts.Mount
			if err := scheme.Convert(external, &internal, nil); err != nil {
				t.Fatal(err)
			}
			expectErrors(t, ValidateMount(&internal), c.want)
		})
	}
}
