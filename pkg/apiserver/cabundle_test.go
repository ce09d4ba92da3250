package apiserver

import (
	"bytes"
	"encoding/json"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
)

func TestCABundleNotBase64In(t *testing.T) {
	const pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
	for _, c := range []struct {
		name, contentType, body string
		bad                     bool
		mount                   string
	}{
		{"JSON create, PEM", "application/json", `{"metadata":{"name":"m"},"spec":{"caBundle":"` + "-----BEGIN CERTIFICATE-----\\nMIIB" + `"}}`, true, "m"},
		{"JSON create, base64 with line breaks", "application/json", `{"spec":{"caBundle":"TUlJ\nQg=="}}`, false, ""},
		{"YAML apply, PEM", "application/apply-patch+yaml", "metadata:\n  name: m\nspec:\n  caBundle: |\n    -----BEGIN CERTIFICATE-----\n    MIIB\n    -----END CERTIFICATE-----\n", true, "m"},
		{"merge patch without caBundle", "application/merge-patch+json", `{"spec":{"timeouts":{}}}`, false, ""},
		{"caBundle null", "application/merge-patch+json", `{"spec":{"caBundle":null}}`, false, ""},
		{"JSON patch of the field", "application/json-patch+json", `[{"op":"test","path":"/spec/caBundle","value":"x y"},{"op":"replace","path":"/spec/caBundle","value":"x y"}]`, true, ""},
		{"JSON patch of spec", "application/json-patch+json", `[{"op":"add","path":"/spec","value":{"caBundle":"x y"}}]`, true, ""},
		{"JSON patch, test only", "application/json-patch+json", `[{"op":"test","path":"/spec/caBundle","value":"x y"}]`, false, ""},
		{"protobuf", "application/vnd.kubernetes.protobuf", "\x00", false, ""},
		{"malformed JSON", "application/json", `{"spec":`, false, ""},
		// As the handler's decoder reads JSON: the last of duplicate keys, keys case-sensitive.
		{"duplicate keys, the last PEM", "application/json", `{"spec":{"caBundle":"TUlJQg==","caBundle":"x y"}}`, true, ""},
		{"duplicate keys, the last base64", "application/json", `{"spec":{"caBundle":"x y","caBundle":"TUlJQg=="}}`, false, ""},
		{"another case of the key", "application/json", `{"spec":{"CABundle":"x y"}}`, false, ""},
		{"YAML in a JSON body", "application/json", "spec:\n  caBundle: x y\n", false, ""},
		{"JSON apply, PEM", "application/apply-patch+yaml", `{"metadata":{"name":"m"},"spec":{"caBundle":"x y"}}`, true, "m"},
		{"YAML flow mapping", "application/yaml", `{metadata: {name: m}, spec: {caBundle: x y}}`, true, "m"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, mount, bad := caBundleNotBase64In(c.contentType, []byte(c.body))
			if bad != c.bad || mount != c.mount {
				t.Errorf("got %v %q, want %v %q", bad, mount, c.bad, c.mount)
			}
		})
	}
	if got := excerpt(pem); got != "-----BEGIN CERTIFICATE-----..." {
		t.Errorf("excerpt: %q", got)
	}
}

// BenchmarkCABundleCheck: what the check costs every Mount write (the status controller's
// and the agents' AgentConnected writes above all), against the handler's own decoding of the
// same body and against reading it as YAML, as the check did before.
func BenchmarkCABundleCheck(b *testing.B) {
	now := metav1.Now()
	m := &v1alpha1.Mount{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Mount"},
		ObjectMeta: metav1.ObjectMeta{Name: "agent-00042", UID: "9a1f0c3e-1d2b-4c5d-8e7f-0a1b2c3d4e5f", ResourceVersion: "123456", Generation: 1, CreationTimestamp: now},
		Spec: v1alpha1.MountSpec{
			Type:     v1alpha1.MountTypeURL,
			Ref:      v1alpha1.ObjectReference{Namespace: "clusters", Name: "agent-00042-kubeconfig"},
			CABundle: bytes.Repeat([]byte("0123456789abcdef"), 80),
			Tunnel:   &v1alpha1.MountTunnel{Credentials: v1alpha1.TunnelCredentialsServer, AgentUser: "system:serviceaccount:agents:agent-00042"},
		},
	}
	for _, manager := range []string{"kubectl-create", "mount-status", "mount-agent-connected"} {
		m.ManagedFields = append(m.ManagedFields, metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "mounts.kcp.io/v1alpha1", Time: &now,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{".":{},"f:conditions":{".":{},"k:{\"type\":\"Ready\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:phase":{},"f:url":{}}}`)}})
	}
	for _, c := range []string{"CredentialsResolved", "TargetReachable", "Ready", "AgentConnected"} {
		m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: "ProbeSucceeded", Message: "Requests through the mount reach its target.", LastTransitionTime: now, ObservedGeneration: 1})
	}
	body, err := json.Marshal(m)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("a Mount status write of %d bytes", len(body))
	b.Run("check", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, bad := caBundleNotBase64In("application/json", body); bad {
				b.Fatal("flagged")
			}
		}
	})
	b.Run("check-as-yaml", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var obj struct {
				Spec map[string]any `json:"spec"`
			}
			if err := yaml.Unmarshal(body, &obj); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("handler-decode", func(b *testing.B) {
		b.ReportAllocs()
		decoder := Codecs.UniversalDeserializer()
		for b.Loop() {
			if _, _, err := decoder.Decode(body, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
}
