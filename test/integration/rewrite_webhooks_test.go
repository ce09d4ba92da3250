package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
)

// presentedWebhook is a webhook server written for the presented names: it knows
// kubevirt.io VirtualMachines and their kubevirt.io/ labels only, and records every
// AdmissionReview it gets.
type presentedWebhook struct {
	URL, CA string

	mu      sync.Mutex
	reviews []string
}

func startPresentedWebhook(t *testing.T, serve func(review *admissionv1.AdmissionReview, vm *unstructured.Unstructured) *admissionv1.AdmissionResponse) *presentedWebhook {
	t.Helper()
	wh := &presentedWebhook{}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		wh.mu.Lock()
		wh.reviews = append(wh.reviews, string(body))
		wh.mu.Unlock()
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		vm := &unstructured.Unstructured{}
		_ = vm.UnmarshalJSON(review.Request.Object.Raw)
		var resp *admissionv1.AdmissionResponse
		if review.Request.Kind.Group != presentedGroup || review.Request.Kind.Kind != "VirtualMachine" || vm.GetAPIVersion() != presentedGroup+"/v1" || review.Request.Resource.Resource != "virtualmachines" {
			resp = &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: fmt.Sprintf("this webhook knows kubevirt.io VirtualMachines only, got %s %s", review.Request.Kind, vm.GetAPIVersion())}}
		} else {
			resp = serve(&review, vm)
		}
		resp.UID = review.Request.UID
		review.Response, review.Request = resp, nil
		_ = json.NewEncoder(w).Encode(&review)
	}))
	t.Cleanup(srv.Close)
	wh.URL = srv.URL
	wh.CA = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	return wh
}

func (wh *presentedWebhook) all() string {
	wh.mu.Lock()
	defer wh.mu.Unlock()
	return strings.Join(wh.reviews, "\n")
}

// TestRenamingMountWebhooks registers a validating and a mutating webhook, both written for
// the presented names, through a renaming mount; the target's real kube-apiserver calls them
// through mount-apiserver's admission relay: they receive AdmissionReviews in presented names
// only, the validating one's denial reaches the client, and the mutating one's JSONPatch
// (a kubevirt.io/ label) is stored under the target's key. Reads through the mount show the
// webhook configurations as written; the target holds relay URLs.
func TestRenamingMountWebhooks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := startRenamingEnvWith(ctx, t, func(o *options.Options) {
		apiOnly(o)
		o.AdmissionRelay.Address = "127.0.0.1:0"
	})
	e.mustKubectl(t, vmCRD, "apply", "-f", "-")
	e.waitEstablished(t)
	e.mustKubectl(t, "", "create", "namespace", "hooks")

	validating := startPresentedWebhook(t, func(_ *admissionv1.AdmissionReview, vm *unstructured.Unstructured) *admissionv1.AdmissionResponse {
		if cpus, _, _ := unstructured.NestedInt64(vm.Object, "spec", "cpus"); cpus > 8 {
			return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: fmt.Sprintf("a VirtualMachine labelled %q may have 8 cpus at most", vm.GetLabels()["kubevirt.io/os"])}}
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
	mutating := startPresentedWebhook(t, func(_ *admissionv1.AdmissionReview, vm *unstructured.Unstructured) *admissionv1.AdmissionResponse {
		patch := `[{"op":"add","path":"/metadata/labels/kubevirt.io~1mutated","value":"by-webhook"}]`
		if vm.GetLabels() == nil {
			patch = `[{"op":"add","path":"/metadata/labels","value":{"kubevirt.io/mutated":"by-webhook"}}]`
		}
		return &admissionv1.AdmissionResponse{Allowed: true, Patch: []byte(patch), PatchType: ptr.To(admissionv1.PatchTypeJSONPatch)}
	})

	core, err := kubernetes.NewForConfig(e.mountConfig)
	if err != nil {
		t.Fatal(err)
	}
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{presentedGroup}, APIVersions: []string{"v1"}, Resources: []string{"virtualmachines"}},
	}}
	clientConfig := func(wh *presentedWebhook, path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(wh.URL + path), CABundle: []byte(wh.CA)}
	}
	if _, err := core.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-policy"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "cpus.vms.example.com", ClientConfig: clientConfig(validating, "/validate"), Rules: rules,
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}, FailurePolicy: ptr.To(admissionregistrationv1.Fail)}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a validating webhook configuration through the mount: %v", err)
	}
	if _, err := core.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-defaults"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "label.vms.example.com", ClientConfig: clientConfig(mutating, "/mutate"), Rules: rules,
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}, FailurePolicy: ptr.To(admissionregistrationv1.Fail)}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a mutating webhook configuration through the mount: %v", err)
	}

	// Through the mount, the configuration is as written; on the target, it is renamed and
	// points at the relay.
	got, err := core.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "vm-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w := got.Webhooks[0]; *w.ClientConfig.URL != validating.URL+"/validate" || string(w.ClientConfig.CABundle) != validating.CA || w.Rules[0].APIGroups[0] != presentedGroup || w.Rules[0].Resources[0] != "virtualmachines" || len(got.Annotations) != 0 {
		t.Errorf("the validating webhook configuration through the mount: %+v %v", w, got.Annotations)
	}
	stored, err := e.target.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "vm-policy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if w := stored.Webhooks[0]; !strings.HasPrefix(*w.ClientConfig.URL, "https://127.0.0.1:") || strings.HasPrefix(*w.ClientConfig.URL, validating.URL) || w.Rules[0].APIGroups[0] != targetGroup || w.Rules[0].Resources[0] != "prefixedvirtualmachines" {
		t.Errorf("the validating webhook configuration on the target: %+v", w)
	}
	list, err := core.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || *list.Items[0].Webhooks[0].ClientConfig.URL != mutating.URL+"/mutate" {
		t.Errorf("listing mutating webhook configurations through the mount: %v %+v", err, list)
	}

	// The target's kube-apiserver calls the webhooks through the relay (it picks the
	// configurations up within a moment).
	vms := dynamic.NewForConfigOrDie(e.mountConfig).Resource(schema.GroupVersionResource{Group: presentedGroup, Version: "v1", Resource: "virtualmachines"}).Namespace("hooks")
	vm := func(name string, cpus int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
			"metadata": map[string]any{"name": name, "labels": map[string]any{"kubevirt.io/os": "alpine"}}, "spec": map[string]any{"cpus": cpus}}}
	}
	waitFor(ctx, t, "the validating webhook denies a machine with 16 cpus", func() bool {
		_, err := vms.Create(ctx, vm("big", 16), metav1.CreateOptions{})
		if err == nil {
			_ = vms.Delete(ctx, "big", metav1.DeleteOptions{})
			return false
		}
		return strings.Contains(err.Error(), `denied the request: a VirtualMachine labelled "alpine" may have 8 cpus at most`)
	})
	created, err := vms.Create(ctx, vm("small", 2), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a machine both webhooks admit: %v", err)
	}
	if created.GetLabels()["kubevirt.io/mutated"] != "by-webhook" {
		t.Errorf("the mutating webhook's label through the mount: %v", created.GetLabels())
	}
	onTarget, err := dynamic.NewForConfigOrDie(e.target.AdminConfig).Resource(schema.GroupVersionResource{Group: targetGroup, Version: "v1", Resource: "prefixedvirtualmachines"}).Namespace("hooks").Get(ctx, "small", metav1.GetOptions{})
	if err != nil || onTarget.GetLabels()[targetGroup+"/mutated"] != "by-webhook" {
		t.Errorf("the mutating webhook's label on the target: %v %v", err, onTarget)
	}

	// The webhooks saw presented names only.
	for name, wh := range map[string]*presentedWebhook{"validating": validating, "mutating": mutating} {
		reviews := wh.all()
		if !strings.Contains(reviews, `"group":"kubevirt.io"`) || !strings.Contains(reviews, `"kubevirt.io/os":"alpine"`) {
			t.Errorf("the %s webhook got no review in presented names:\n%.2000s", name, reviews)
		}
		if m := targetInResponses.FindString(reviews); m != "" {
			t.Errorf("the %s webhook saw a target name %q:\n%.2000s", name, m, reviews)
		}
	}

	// Whoever reaches the relay needs the token of a configuration the mount wrote, and
	// reaches only the webhooks it names.
	relayURL := *stored.Webhooks[0].ClientConfig.URL
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.server.CAData)
	relayClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	review := validating.all()
	review, _, _ = strings.Cut(review, "\n")
	for name, c := range map[string]struct {
		method, url string
		want        int
	}{
		"the stored URL":    {http.MethodPost, relayURL, http.StatusOK},
		"GET":               {http.MethodGet, relayURL, http.StatusMethodNotAllowed},
		"another token":     {http.MethodPost, relayURL[:strings.LastIndex(relayURL, "/")+1] + "forged", http.StatusForbidden},
		"another webhook":   {http.MethodPost, strings.Replace(relayURL, "/cpus.vms.example.com/", "/label.vms.example.com/", 1), http.StatusForbidden},
		"another mount UID": {http.MethodPost, strings.Replace(relayURL, string(e.mountUID(ctx, t)), "00000000-0000-0000-0000-000000000000", 1), http.StatusNotFound},
		"not a relay path":  {http.MethodPost, relayURL + "/more", http.StatusNotFound},
	} {
		req, _ := http.NewRequestWithContext(ctx, c.method, c.url, strings.NewReader(review))
		res, err := relayClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode != c.want {
			t.Errorf("relay call with %s: %d %s, want %d", name, res.StatusCode, body, c.want)
		}
	}

	// A relay record the caller writes is replaced by the proxy's own.
	forged := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "forged", Annotations: map[string]string{"mounts.kcp.io/admission-relay": `{"token":"known","webhooks":{"x.vms.example.com":{"url":"https://169.254.169.254/"}}}`}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "x.vms.example.com", ClientConfig: clientConfig(validating, "/validate"), Rules: rules,
			SideEffects: ptr.To(admissionregistrationv1.SideEffectClassNone), AdmissionReviewVersions: []string{"v1"}, FailurePolicy: ptr.To(admissionregistrationv1.Ignore)}},
	}
	if _, err := core.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, forged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	storedForged, err := e.target.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "forged", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := storedForged.Annotations["mounts.kcp.io/admission-relay"]; strings.Contains(a, "known") || strings.Contains(a, "169.254") || !strings.Contains(a, validating.URL) {
		t.Errorf("the caller's relay record was kept: %s", a)
	}

	testWebhookPatches(ctx, t, e, relayClient, review)
	e.checkNoLeaks(t)
}

// testWebhookPatches applies a webhook configuration twice with kubectl (the second apply is a
// strategic merge patch), patches it with JSON and merge patches, and checks that every
// patch is applied to the configuration as written and relayed again: the target's
// kube-apiserver calls the patched webhook through the relay, a relay record in a patch is
// replaced, the previous relay URL stops working. Server-side apply is refused with 415.
func testWebhookPatches(ctx context.Context, t *testing.T, e *renamingEnv, relayClient *http.Client, review string) {
	t.Helper()
	hook := startPresentedWebhook(t, func(_ *admissionv1.AdmissionReview, vm *unstructured.Unstructured) *admissionv1.AdmissionResponse {
		if cpus, _, _ := unstructured.NestedInt64(vm.Object, "spec", "cpus"); cpus > 4 {
			return &admissionv1.AdmissionResponse{Result: &metav1.Status{Message: "the applied webhook allows 4 cpus at most"}}
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	})
	manifest := func(timeout int, labels string) string {
		return fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: vm-applied
  labels: {%s}
webhooks:
- name: applied.vms.example.com
  clientConfig:
    url: %s/applied
    caBundle: %s
  rules:
  - operations: ["CREATE", "UPDATE"]
    apiGroups: ["kubevirt.io"]
    apiVersions: ["v1"]
    resources: ["virtualmachines"]
  sideEffects: None
  admissionReviewVersions: ["v1"]
  failurePolicy: Fail
  timeoutSeconds: %d
`, labels, hook.URL, base64.StdEncoding.EncodeToString([]byte(hook.CA)), timeout)
	}
	core, err := kubernetes.NewForConfig(e.mountConfig)
	if err != nil {
		t.Fatal(err)
	}
	onTarget := func() *admissionregistrationv1.ValidatingWebhookConfiguration {
		t.Helper()
		c, err := e.target.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "vm-applied", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	throughMount := func() *admissionregistrationv1.ValidatingWebhookConfiguration {
		t.Helper()
		c, err := core.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "vm-applied", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	e.mustKubectl(t, manifest(10, ""), "apply", "-f", "-")
	first := *onTarget().Webhooks[0].ClientConfig.URL
	if out := e.mustKubectl(t, manifest(5, "team: a"), "apply", "-f", "-"); !strings.Contains(out, "configured") {
		t.Errorf("the second kubectl apply: %s", out)
	}
	got, stored := throughMount(), onTarget()
	if w := got.Webhooks[0]; *w.ClientConfig.URL != hook.URL+"/applied" || string(w.ClientConfig.CABundle) != hook.CA || *w.TimeoutSeconds != 5 || got.Labels["team"] != "a" || w.Rules[0].APIGroups[0] != presentedGroup {
		t.Errorf("after the second apply, through the mount: %+v %v", w, got.Labels)
	}
	second := *stored.Webhooks[0].ClientConfig.URL
	if w := stored.Webhooks[0]; second == first || !strings.HasPrefix(second, "https://127.0.0.1:") || *w.TimeoutSeconds != 5 || w.Rules[0].APIGroups[0] != targetGroup {
		t.Errorf("after the second apply, on the target (first relay URL %s): %+v", first, w)
	}

	// A JSON patch that points the webhook elsewhere and writes its own relay record; a
	// merge patch of a label.
	forged := `{"token":"known","webhooks":{"applied.vms.example.com":{"url":"https://169.254.169.254/"}}}`
	jsonPatch := fmt.Sprintf(`[{"op":"replace","path":"/webhooks/0/clientConfig/url","value":%q},{"op":"add","path":"/metadata/annotations/mounts.kcp.io~1admission-relay","value":%q}]`, hook.URL+"/patched", forged)
	e.mustKubectl(t, "", "patch", "validatingwebhookconfiguration", "vm-applied", "--type=json", "-p", jsonPatch)
	e.mustKubectl(t, "", "patch", "validatingwebhookconfiguration", "vm-applied", "--type=merge", "-p", `{"metadata":{"labels":{"patched":"merge"}}}`)
	got, stored = throughMount(), onTarget()
	if w := got.Webhooks[0]; *w.ClientConfig.URL != hook.URL+"/patched" || got.Labels["patched"] != "merge" || got.Labels["team"] != "a" || got.Annotations["mounts.kcp.io/admission-relay"] != "" || got.Annotations["kubectl.kubernetes.io/last-applied-configuration"] == "" {
		t.Errorf("after the patches, through the mount: %+v %v %v", w, got.Labels, got.Annotations)
	}
	third := *stored.Webhooks[0].ClientConfig.URL
	if a := stored.Annotations["mounts.kcp.io/admission-relay"]; strings.Contains(a, "known") || strings.Contains(a, "169.254") || !strings.Contains(a, hook.URL+"/patched") || third == second || strings.HasPrefix(third, hook.URL) {
		t.Errorf("after the patches, on the target: %s %s", third, a)
	}

	// The target's kube-apiserver calls the patched webhook through the relay; the relay URLs
	// of earlier writes no longer work.
	vms := dynamic.NewForConfigOrDie(e.mountConfig).Resource(schema.GroupVersionResource{Group: presentedGroup, Version: "v1", Resource: "virtualmachines"}).Namespace("hooks")
	waitFor(ctx, t, "the patched webhook denies a machine with 6 cpus", func() bool {
		_, err := vms.Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
			"metadata": map[string]any{"name": "mid"}, "spec": map[string]any{"cpus": int64(6)}}}, metav1.CreateOptions{})
		if err == nil {
			_ = vms.Delete(ctx, "mid", metav1.DeleteOptions{})
			return false
		}
		return strings.Contains(err.Error(), "the applied webhook allows 4 cpus at most")
	})
	if reviews := hook.all(); !strings.Contains(reviews, `"group":"kubevirt.io"`) || targetInResponses.MatchString(reviews) {
		t.Errorf("the patched webhook's reviews:\n%.2000s", reviews)
	}
	for url, want := range map[string]int{first: http.StatusForbidden, second: http.StatusForbidden, third: http.StatusOK} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(review))
		res, err := relayClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("relay URL %s: %d, want %d", url, res.StatusCode, want)
		}
	}

	// A patch that does not apply gets a clear 422 and changes nothing.
	if out, err := e.kubectl(t, "", "", nil, "patch", "validatingwebhookconfiguration", "vm-applied", "--type=json", "-p", `[{"op":"test","path":"/webhooks/0/name","value":"other"}]`); err == nil || !strings.Contains(out, "the patch does not apply to webhook configuration") {
		t.Errorf("a JSON patch whose test fails: %v\n%s", err, out)
	}
	if w := onTarget().Webhooks[0]; *w.ClientConfig.URL != third {
		t.Errorf("a refused patch changed the relay URL: %s", *w.ClientConfig.URL)
	}

	testServiceProxyReach(ctx, t, e, hook.URL)

	// Server-side apply is refused, saying why.
	if out, err := e.kubectl(t, "", manifest(7, ""), nil, "apply", "--server-side", "-f", "-"); err == nil || !strings.Contains(out, "server-side apply is not supported") {
		t.Errorf("kubectl apply --server-side of a webhook configuration through the mount: %v\n%s", err, out)
	}
	if w := onTarget().Webhooks[0]; *w.ClientConfig.URL != third || *w.TimeoutSeconds != 5 {
		t.Errorf("after the refused server-side apply, on the target: %+v", w)
	}
}

// testServiceProxyReach measures why webhooks with clientConfig.service are not relayed:
// the target's service proxy reaches no loopback webhook (an ExternalName Service has no
// endpoints to proxy to; Endpoints and EndpointSlices refuse loopback addresses), and it
// would not verify the webhook's certificate anyway (it dials with InsecureSkipVerify).
func testServiceProxyReach(ctx context.Context, t *testing.T, e *renamingEnv, hookURL string) {
	t.Helper()
	_, port, _ := strings.Cut(strings.TrimPrefix(hookURL, "https://"), ":")
	p, _ := strconv.Atoi(port)
	kube := e.target.Client
	proxyGet := func(svc string) error {
		body, err := kube.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/hooks/services/https:" + svc + ":" + port + "/proxy/applied").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("%w: %s", err, body)
		}
		return nil
	}
	if _, err := kube.CoreV1().Services("hooks").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "external"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost", Ports: []corev1.ServicePort{{Name: "https", Port: int32(p)}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := proxyGet("external")
	t.Logf("service proxy to an ExternalName Service of localhost: %v", err)
	if err == nil {
		t.Errorf("the service proxy reached a loopback webhook through an ExternalName Service: relay clientConfig.service now")
	}
	if _, err := kube.CoreV1().Services("hooks").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "selectorless"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: int32(p)}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = kube.CoreV1().Endpoints("hooks").Create(ctx, &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "selectorless"},
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "127.0.0.1"}}, Ports: []corev1.EndpointPort{{Name: "https", Port: int32(p)}}}}}, metav1.CreateOptions{})
	t.Logf("Endpoints of 127.0.0.1: %v", err)
	_, serr := kube.DiscoveryV1().EndpointSlices("hooks").Create(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "selectorless", Labels: map[string]string{discoveryv1.LabelServiceName: "selectorless"}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(p))}}}, metav1.CreateOptions{})
	t.Logf("EndpointSlice of 127.0.0.1: %v", serr)
	err = proxyGet("selectorless")
	t.Logf("service proxy to a Service with those endpoints: %v", err)
	if err == nil {
		t.Errorf("the service proxy reached a loopback webhook: relay clientConfig.service now")
	}

	// So a webhook registered by Service through the mount is refused, saying why.
	byService := `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration","metadata":{"name":"by-service"},"webhooks":[{"name":"svc.vms.example.com",` +
		`"clientConfig":{"service":{"namespace":"hooks","name":"selectorless","port":` + port + `}},"rules":[{"operations":["CREATE"],"apiGroups":["kubevirt.io"],"apiVersions":["v1"],"resources":["virtualmachines"]}],` +
		`"sideEffects":"None","admissionReviewVersions":["v1"]}]}`
	if out, err := e.kubectl(t, "", byService, nil, "create", "-f", "-"); err == nil || !strings.Contains(out, "does not verify a service's certificate against caBundle") {
		t.Errorf("a webhook configuration by Service through the mount: %v\n%s", err, out)
	}
}
