package rewrite

import (
	"encoding/base64"
	"errors"
	"testing"
)

func TestBody(t *testing.T) {
	r := kubevirtRules(t)
	const vm = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines/vm1"
	for _, tc := range []struct {
		name, path, contentType, body, want string
	}{
		{
			name: "create", path: vm, contentType: "application/json",
			body: `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"vm1","labels":{"kubevirt.io/os":"linux","app":"x"},"finalizers":["kubevirt.io/protect","other"]},"spec":{"running":true}}`,
			want: `{"apiVersion":"x.virtualization.deckhouse.io/v1","kind":"PrefixedVirtualMachine","metadata":{"name":"vm1","labels":{"x.virtualization.deckhouse.io/os":"linux","app":"x"},"finalizers":["x.virtualization.deckhouse.io/protect","other"]},"spec":{"running":true}}`,
		},
		{
			name: "delete options", path: vm, contentType: "application/json",
			body: `{"kind":"DeleteOptions","apiVersion":"kubevirt.io/v1","propagationPolicy":"Foreground","preconditions":{"uid":"1"}}`,
			want: `{"kind":"DeleteOptions","apiVersion":"x.virtualization.deckhouse.io/v1","propagationPolicy":"Foreground","preconditions":{"uid":"1"}}`,
		},
		{
			name: "delete options v1", path: vm, contentType: "application/json",
			body: `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}`,
			want: `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}`,
		},
		{
			name: "merge patch of labels", path: vm, contentType: "application/merge-patch+json",
			body: `{"metadata":{"labels":{"kubevirt.io/os":null,"kubevirt.io/new":"1"}}}`,
			want: `{"metadata":{"labels":{"x.virtualization.deckhouse.io/os":null,"x.virtualization.deckhouse.io/new":"1"}}}`,
		},
		{
			name: "strategic merge patch", path: "/api/v1/namespaces/default/pods/p", contentType: "application/strategic-merge-patch+json",
			body: `{"metadata":{"$setElementOrder/finalizers":["kubevirt.io/a","b"],"$deleteFromPrimitiveList/finalizers":["kubevirt.io/c"],"finalizers":["kubevirt.io/a"],"ownerReferences":[{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","name":"vm1","uid":"1"}]}}`,
			want: `{"metadata":{"$setElementOrder/finalizers":["x.virtualization.deckhouse.io/a","b"],"$deleteFromPrimitiveList/finalizers":["x.virtualization.deckhouse.io/c"],"finalizers":["x.virtualization.deckhouse.io/a"],"ownerReferences":[{"apiVersion":"x.virtualization.deckhouse.io/v1","kind":"PrefixedVirtualMachine","name":"vm1","uid":"1"}]}}`,
		},
		{
			name: "json patch", path: vm, contentType: "application/json-patch+json",
			body: `[{"op":"add","path":"/metadata/labels/kubevirt.io~1os","value":"linux"},` +
				`{"op":"move","from":"/metadata/annotations/kubevirt.io~1a","path":"/metadata/annotations/kubevirt.io~1b"},` +
				`{"op":"replace","path":"/metadata/labels","value":{"kubevirt.io/x":"1"}},` +
				`{"op":"add","path":"/metadata/finalizers/-","value":"kubevirt.io/f"},` +
				`{"op":"test","path":"/apiVersion","value":"kubevirt.io/v1"},` +
				`{"op":"test","path":"/kind","value":"VirtualMachine"},` +
				`{"op":"add","path":"/metadata/ownerReferences/0","value":{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","name":"o","uid":"2"}},` +
				`{"op":"replace","path":"/spec/running","value":false}]`,
			want: `[{"op":"add","path":"/metadata/labels/x.virtualization.deckhouse.io~1os","value":"linux"},` +
				`{"op":"move","from":"/metadata/annotations/x.virtualization.deckhouse.io~1a","path":"/metadata/annotations/x.virtualization.deckhouse.io~1b"},` +
				`{"op":"replace","path":"/metadata/labels","value":{"x.virtualization.deckhouse.io/x":"1"}},` +
				`{"op":"add","path":"/metadata/finalizers/-","value":"x.virtualization.deckhouse.io/f"},` +
				`{"op":"test","path":"/apiVersion","value":"x.virtualization.deckhouse.io/v1"},` +
				`{"op":"test","path":"/kind","value":"PrefixedVirtualMachine"},` +
				`{"op":"add","path":"/metadata/ownerReferences/0","value":{"apiVersion":"x.virtualization.deckhouse.io/v1","kind":"PrefixedVirtualMachine","name":"o","uid":"2"}},` +
				`{"op":"replace","path":"/spec/running","value":false}]`,
		},
		{
			name: "apply yaml", path: vm, contentType: "application/apply-patch+yaml",
			body: "apiVersion: kubevirt.io/v1\nkind: VirtualMachine\nmetadata:\n  name: vm1\n  labels:\n    kubevirt.io/os: linux\nspec:\n  running: true\n",
			want: `{"apiVersion":"x.virtualization.deckhouse.io/v1","kind":"PrefixedVirtualMachine","metadata":{"labels":{"x.virtualization.deckhouse.io/os":"linux"},"name":"vm1"},"spec":{"running":true}}`,
		},
		{
			name: "apply json", path: vm, contentType: "application/apply-patch+yaml",
			body: `{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","metadata":{"name":"vm1"}}`,
			want: `{"apiVersion":"x.virtualization.deckhouse.io/v1","kind":"PrefixedVirtualMachine","metadata":{"name":"vm1"}}`,
		},
		{
			name: "clusterrole", path: "/apis/rbac.authorization.k8s.io/v1/clusterroles", contentType: "application/json",
			body: `{"kind":"ClusterRole","apiVersion":"rbac.authorization.k8s.io/v1","metadata":{"name":"r"},"rules":[{"apiGroups":["kubevirt.io"],"resources":["virtualmachines","virtualmachines/status"],"verbs":["get"]}]}`,
			want: `{"kind":"ClusterRole","apiVersion":"rbac.authorization.k8s.io/v1","metadata":{"name":"r"},"rules":[{"apiGroups":["x.virtualization.deckhouse.io"],"resources":["prefixedvirtualmachines","prefixedvirtualmachines/status"],"verbs":["get"]}]}`,
		},
		{
			name: "self subject access review", path: "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", contentType: "application/json",
			body: `{"kind":"SelfSubjectAccessReview","apiVersion":"authorization.k8s.io/v1","spec":{"resourceAttributes":{"group":"kubevirt.io","resource":"virtualmachines","verb":"list"}}}`,
			want: `{"kind":"SelfSubjectAccessReview","apiVersion":"authorization.k8s.io/v1","spec":{"resourceAttributes":{"group":"x.virtualization.deckhouse.io","resource":"prefixedvirtualmachines","verb":"list"}}}`,
		},
		{
			name: "deployment templates and selectors", path: "/apis/apps/v1/namespaces/default/deployments", contentType: "application/json",
			body: `{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"d"},"spec":{"selector":{"matchLabels":{"kubevirt.io/app":"a"},"matchExpressions":[{"key":"kubevirt.io/tier","operator":"Exists"}]},"template":{"metadata":{"labels":{"kubevirt.io/app":"a"},"annotations":{"kubevirt.io/n":"1"}},"spec":{"containers":[]}}}}`,
			want: `{"kind":"Deployment","apiVersion":"apps/v1","metadata":{"name":"d"},"spec":{"selector":{"matchLabels":{"x.virtualization.deckhouse.io/app":"a"},"matchExpressions":[{"key":"x.virtualization.deckhouse.io/tier","operator":"Exists"}]},"template":{"metadata":{"labels":{"x.virtualization.deckhouse.io/app":"a"},"annotations":{"x.virtualization.deckhouse.io/n":"1"}},"spec":{"containers":[]}}}}`,
		},
		{
			name: "service selector", path: "/api/v1/namespaces/default/services", contentType: "application/json",
			body: `{"kind":"Service","apiVersion":"v1","metadata":{"name":"s"},"spec":{"selector":{"kubevirt.io/domain":"vm1"},"ports":[{"port":80}]}}`,
			want: `{"kind":"Service","apiVersion":"v1","metadata":{"name":"s"},"spec":{"selector":{"x.virtualization.deckhouse.io/domain":"vm1"},"ports":[{"port":80}]}}`,
		},
		{
			name: "untouched object", path: "/api/v1/namespaces/default/configmaps", contentType: "application/json",
			body: `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c"},"data":{"kubevirt.io/x":"kubevirt.io/v1"}}`,
			want: `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"c"},"data":{"kubevirt.io/x":"kubevirt.io/v1"}}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := r.Request("PATCH", tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, err := q.Body(tc.contentType, []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			jsonEqual(t, out, []byte(tc.want))
		})
	}
}

func TestBodyErrors(t *testing.T) {
	r := kubevirtRules(t)
	q, _ := r.Request("POST", "/apis/kubevirt.io/v1/namespaces/default/virtualmachines", nil)
	for _, ct := range []string{"application/vnd.kubernetes.protobuf", "application/cbor", "application/apply-patch+cbor", "text/plain"} {
		_, err := q.Body(ct, []byte("\x0a\x0bk8s"))
		var e *UnsupportedMediaTypeError
		if !errors.As(err, &e) {
			t.Errorf("%s: %v, want UnsupportedMediaTypeError", ct, err)
		}
	}
	for _, tc := range []struct{ ct, body string }{
		{"application/json", `{"apiVersion":`},
		{"application/json-patch+json", `{"op":"add"}`},
		{"application/json-patch+json", `[1,"kubevirt.io/x"]`},
		{"application/apply-patch+yaml", "a: [\n"},
		{"application/merge-patch+json", `nope`},
	} {
		if _, err := q.Body(tc.ct, []byte(tc.body)); err == nil {
			t.Errorf("%s %q: want an error", tc.ct, tc.body)
		}
	}
}

func TestAdmission(t *testing.T) {
	r := kubevirtRules(t)
	review := `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"u1",` +
		`"kind":{"group":"x.virtualization.deckhouse.io","version":"v1","kind":"PrefixedVirtualMachine"},` +
		`"resource":{"group":"x.virtualization.deckhouse.io","version":"v1","resource":"prefixedvirtualmachines"},"subResource":"status",` +
		`"requestKind":{"group":"x.virtualization.deckhouse.io","version":"v1","kind":"PrefixedVirtualMachine"},` +
		`"requestResource":{"group":"x.virtualization.deckhouse.io","version":"v1","resource":"prefixedvirtualmachines"},"requestSubResource":"status",` +
		`"name":"vm1","namespace":"default","operation":"UPDATE","userInfo":{"username":"alice"},` +
		`"object":{"apiVersion":"x.virtualization.deckhouse.io/v1","kind":"PrefixedVirtualMachine","metadata":{"name":"vm1","labels":{"x.virtualization.deckhouse.io/os":"linux"}}},` +
		`"oldObject":{"apiVersion":"x.virtualization.deckhouse.io/v1","kind":"PrefixedVirtualMachine","metadata":{"name":"vm1"}},` +
		`"dryRun":false,"options":{"kind":"UpdateOptions","apiVersion":"meta.k8s.io/v1"}}}`
	out, err := r.AdmissionReviewToPresented([]byte(review))
	if err != nil {
		t.Fatal(err)
	}
	noTargetNames(t, out)
	for p, want := range map[string]string{
		"request.kind.group": "kubevirt.io", "request.kind.kind": "VirtualMachine", "request.requestKind.kind": "VirtualMachine",
		"request.resource.resource": "virtualmachines", "request.requestResource.group": "kubevirt.io", "request.subResource": "status",
		"request.object.kind": "VirtualMachine", "request.oldObject.apiVersion": "kubevirt.io/v1",
		`request.object.metadata.labels.kubevirt\.io/os`: "linux", "request.options.kind": "UpdateOptions",
	} {
		if got := get(t, out, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}

	patch := `[{"op":"add","path":"/metadata/labels/kubevirt.io~1mutated","value":"yes"},{"op":"add","path":"/metadata/ownerReferences","value":[{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachine","name":"o","uid":"1"}]}]`
	resp := `{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"u1","allowed":true,"patchType":"JSONPatch","patch":"` +
		base64.StdEncoding.EncodeToString([]byte(patch)) + `"}}`
	out, err = r.AdmissionResponseToTarget([]byte(resp))
	if err != nil {
		t.Fatal(err)
	}
	got, err := base64.StdEncoding.DecodeString(get(t, out, "response.patch"))
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, got, []byte(`[{"op":"add","path":"/metadata/labels/x.virtualization.deckhouse.io~1mutated","value":"yes"},{"op":"add","path":"/metadata/ownerReferences","value":[{"apiVersion":"x.virtualization.deckhouse.io/v1","kind":"PrefixedVirtualMachine","name":"o","uid":"1"}]}]`))
	if get(t, out, "response.uid") != "u1" || get(t, out, "response.allowed") != "true" {
		t.Fatalf("%s", out)
	}

	// Without a patch the response passes; bad input is an error, never a panic.
	plain := []byte(`{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","response":{"uid":"u1","allowed":false,"status":{"message":"no"}}}`)
	if out, err := r.AdmissionResponseToTarget(plain); err != nil || string(out) != string(plain) {
		t.Fatalf("%s %v", out, err)
	}
	for _, bad := range []string{`[]`, `{"response":{"patchType":"JSONPatch","patch":"!!"}}`, `{"response":{"patchType":"Merge","patch":"e30="}}`,
		`{"response":{"patchType":"JSONPatch","patch":"e30="}}`} {
		if _, err := r.AdmissionResponseToTarget([]byte(bad)); err == nil {
			t.Errorf("%s: want an error", bad)
		}
	}
	for _, bad := range []string{`[]`, `{}`, `{"request":`} {
		if _, err := r.AdmissionReviewToPresented([]byte(bad)); err == nil {
			t.Errorf("%s: want an error", bad)
		}
	}
}
