package secrets

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func secret(data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod", Namespace: "clusters"}, Data: data}
}

func TestPrepareForCreate(t *testing.T) {
	s := secret(map[string][]byte{"a": []byte("1")})
	s.StringData = map[string]string{"kubeconfig": "k", "a": "2"}
	strategy{}.PrepareForCreate(context.Background(), s)
	if s.Type != corev1.SecretTypeOpaque || s.StringData != nil || string(s.Data["kubeconfig"]) != "k" || string(s.Data["a"]) != "2" {
		t.Errorf("after PrepareForCreate: type %q data %q stringData %v; want Opaque, stringData merged over data", s.Type, s.Data, s.StringData)
	}
}

func TestValidate(t *testing.T) {
	for name, c := range map[string]struct {
		secret *corev1.Secret
		want   string // substring of the errors, "" for valid
	}{
		"valid":          {secret(map[string][]byte{"kubeconfig": []byte("x")}), ""},
		"bad key":        {secret(map[string][]byte{"a/b": nil}), `data[a/b]`},
		"too large":      {secret(map[string][]byte{"a": make([]byte, MaxSecretSize), "b": {1}}), "data: Too long"},
		"no namespace":   {&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, "metadata.namespace: Required"},
		"bad name":       {&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "X_Y", Namespace: "clusters"}}, "metadata.name: Invalid"},
		"long type name": {&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "clusters"}, Type: corev1.SecretType(strings.Repeat("t", 254))}, "type: Too long"},
	} {
		errs := strategy{}.Validate(context.Background(), c.secret)
		switch {
		case c.want == "" && len(errs) > 0:
			t.Errorf("%s: %v", name, errs)
		case c.want != "" && !strings.Contains(errs.ToAggregate().Error(), c.want):
			t.Errorf("%s: %v, want %q", name, errs, c.want)
		}
	}
}

func TestValidateUpdate(t *testing.T) {
	old := secret(map[string][]byte{"kubeconfig": []byte("x")})
	old.Type, old.ResourceVersion = corev1.SecretTypeOpaque, "1"

	retyped := old.DeepCopy()
	retyped.Type = corev1.SecretTypeTLS
	if errs := (strategy{}).ValidateUpdate(context.Background(), retyped, old); !strings.Contains(errs.ToAggregate().Error(), "type: Invalid") {
		t.Errorf("type change: %v", errs)
	}

	frozen := old.DeepCopy()
	frozen.Immutable = ptr.To(true)
	changed := frozen.DeepCopy()
	changed.Data["kubeconfig"] = []byte("y")
	if errs := (strategy{}).ValidateUpdate(context.Background(), changed, frozen); !strings.Contains(errs.ToAggregate().Error(), "data: Forbidden") {
		t.Errorf("data change of an immutable Secret: %v", errs)
	}
	thawed := frozen.DeepCopy()
	thawed.Immutable = nil
	if errs := (strategy{}).ValidateUpdate(context.Background(), thawed, frozen); !strings.Contains(errs.ToAggregate().Error(), "immutable: Forbidden") {
		t.Errorf("unsetting immutable: %v", errs)
	}
	labelled := frozen.DeepCopy()
	labelled.Labels = map[string]string{"a": "b"}
	if errs := (strategy{}).ValidateUpdate(context.Background(), labelled, frozen); len(errs) > 0 {
		t.Errorf("label change of an immutable Secret: %v", errs)
	}
}
