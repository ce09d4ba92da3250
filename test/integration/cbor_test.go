package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor"
	"k8s.io/apiserver/pkg/storage/value"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/embeddedetcd"
	clientset "github.com/kcp-dev/mount-apiserver/pkg/generated/clientset/versioned"
	"github.com/kcp-dev/mount-apiserver/pkg/storagevalue"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// contentTypes records the Content-Type of every response a client receives.
type contentTypes struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *contentTypes) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil {
			c.mu.Lock()
			c.seen[req.Method+" "+resp.Header.Get("Content-Type")]++
			c.mu.Unlock()
		}
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestCBOR: with --feature-gates=CBORServingAndStorage=true the server answers
// application/cbor to clients that ask for it (client-go preferring CBOR, a raw request,
// kubectl with client-go's CBOR gates), the same objects as in JSON; JSON clients get JSON;
// etcd keeps the compressed JSON.
func TestCBOR(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	etcd, err := embeddedetcd.Start(ctx, embeddedetcd.Options{Directory: t.TempDir(), LogLevel: "warn"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	// CBOR is opt-in: the binary, turned on with the flag as a user gives it.
	s := framework.BuildBinary(t).Start(t, t.TempDir(), "--etcd-servers="+etcd.ClientURL, "--status-controller=false",
		"--feature-gates=CBORServingAndStorage=true").Server
	for _, name := range []string{"a", "b", "c"} {
		if _, err := s.Client.MountsV1alpha1().Mounts().Create(ctx, urlMount(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// client-go preferring CBOR (both of its alpha gates, as a user turns them on with
	// KUBE_FEATURE_ClientsAllowCBOR / KUBE_FEATURE_ClientsPreferCBOR).
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.ClientsAllowCBOR, true)
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.ClientsPreferCBOR, true)
	seen := &contentTypes{seen: map[string]int{}}
	cfg := rest.CopyConfig(s.Config)
	cfg.Wrap(seen.wrap)
	cborClient, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cborClient.MountsV1alpha1().Mounts().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	created, err := cborClient.MountsV1alpha1().Mounts().Create(ctx, urlMount("d"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if m, ok := ev.Object.(*v1alpha1.Mount); !ok || m.Name == "" {
			t.Errorf("watch event over CBOR: %v %T", ev.Type, ev.Object)
		}
	case <-time.After(wait30s):
		t.Fatal("no watch event over CBOR")
	}
	got, err := cborClient.MountsV1alpha1().Mounts().Get(ctx, "d", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(created, got); diff != "" {
		t.Errorf("CBOR create and get differ: %s", diff)
	}
	cborList, err := cborClient.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen.mu.Lock()
	for k := range seen.seen {
		if !strings.HasPrefix(k, "GET application/cbor") && !strings.HasPrefix(k, "POST application/cbor") {
			t.Errorf("client-go preferring CBOR received %q", k)
		}
	}
	if seen.seen["GET application/cbor-seq"] == 0 || seen.seen["POST application/cbor"] == 0 {
		t.Errorf("client-go preferring CBOR: responses %v, want a CBOR watch and create", seen.seen)
	}
	seen.mu.Unlock()

	// JSON clients are unaffected: raw requests, and the typed JSON client.
	jsonCfg := rest.CopyConfig(s.Config)
	jsonCfg.ContentType = "application/json" // as set, not defaulted: the gates leave it alone
	jsonClient, err := clientset.NewForConfig(jsonCfg)
	if err != nil {
		t.Fatal(err)
	}
	jsonList, err := jsonClient.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{ResourceVersion: cborList.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(jsonList, cborList); diff != "" || len(cborList.Items) != 4 {
		t.Errorf("LIST in CBOR (%d items) differs from JSON: %s", len(cborList.Items), diff)
	}
	raw := func(path, accept string) ([]byte, string, int) {
		t.Helper()
		c, err := rest.HTTPClientFor(s.Config)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", accept)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s (%s): %v", path, accept, err)
		}
		return body, resp.Header.Get("Content-Type"), resp.StatusCode
	}
	const list = "/apis/mounts.kcp.io/v1alpha1/mounts"
	jsonBody, ct, code := raw(list, "application/json")
	if code != http.StatusOK || ct != "application/json" || !json.Valid(jsonBody) {
		t.Errorf("Accept: application/json got %q, valid JSON %v", ct, json.Valid(jsonBody))
	}
	var fromJSON v1alpha1.MountList
	if err := json.Unmarshal(jsonBody, &fromJSON); err != nil {
		t.Fatal(err)
	}
	cborBody, ct, code := raw(list, "application/cbor")
	if code != http.StatusOK || ct != "application/cbor" {
		t.Fatalf("Accept: application/cbor got %d %q", code, ct)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	var fromCBOR v1alpha1.MountList
	if _, _, err := cbor.NewSerializer(scheme, scheme).Decode(cborBody, nil, &fromCBOR); err != nil {
		t.Fatalf("decoding the CBOR LIST: %v", err)
	}
	// The Mounts are the same; the list's resourceVersion may have moved on between reads.
	if diff := cmp.Diff(fromJSON.Items, fromCBOR.Items); diff != "" || len(fromCBOR.Items) != 4 {
		t.Errorf("raw CBOR LIST (%d items) differs from JSON: %s", len(fromCBOR.Items), diff)
	}
	if len(cborBody) >= len(jsonBody) {
		t.Errorf("CBOR LIST is %d bytes, JSON %d", len(cborBody), len(jsonBody))
	}
	// Tables: k8s.io/apiserver v0.37.2 converts to Table for JSON and YAML only (Table in CBOR
	// is 406 as in kube-apiserver); kubectl asks for a JSON Table with or without its CBOR gates.
	if body, ct, code := raw(list, "application/json;as=Table;v=v1;g=meta.k8s.io"); code != http.StatusOK || !strings.HasPrefix(ct, "application/json") || !bytes.Contains(body, []byte(`"kind":"Table"`)) {
		t.Errorf("Table in JSON: %d %q", code, ct)
	}
	if _, _, code := raw(list, "application/cbor;as=Table;v=v1;g=meta.k8s.io"); code != http.StatusNotAcceptable {
		t.Errorf("Table in CBOR: %d, want 406 as upstream answers", code)
	}

	// etcd keeps the compressed JSON, also for the Mount created in CBOR.
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.ClientURL}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	key := "/mount-apiserver/mounts.kcp.io/mounts/_default/d"
	stored, err := client.Get(ctx, key)
	if err != nil || len(stored.Kvs) != 1 {
		t.Fatalf("reading %s: %v", key, err)
	}
	plain, _, err := storagevalue.Compressing(nil).TransformFromStorage(ctx, stored.Kvs[0].Value, value.DefaultContext(key))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(stored.Kvs[0].Value, []byte(storagevalue.Prefix)) || !json.Valid(plain) || !bytes.Contains(plain, []byte(`"kind":"Mount"`)) {
		t.Errorf("stored value of the Mount created in CBOR is not compressed JSON: %q", plain)
	}

	// Real kubectl: as it comes, and with client-go's CBOR gates on.
	for _, env := range [][]string{nil, {"KUBE_FEATURE_ClientsAllowCBOR=true", "KUBE_FEATURE_ClientsPreferCBOR=true"}} {
		for _, args := range [][]string{{"get", "mounts"}, {"get", "mount", "d", "-o", "json"}, {"label", "mount", "d", fmt.Sprintf("env%d=yes", len(env))}} {
			cmd := exec.Command("kubectl", append([]string{"--kubeconfig", s.Kubeconfig, "-v=8"}, args...)...)
			cmd.Env = append(os.Environ(), env...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl %v with %v: %v\n%s", args, env, err, out)
			}
			// kubectl v1.37.1 asks for JSON (Tables, unstructured objects, patches) even with
			// client-go's CBOR gates; -v=8 logs the headers.
			if strings.Contains(string(out), "application/cbor") || !strings.Contains(string(out), "Content-Type: application/json") {
				t.Errorf("kubectl %v with %v: not JSON throughout", args, env)
			}
			if args[1] == "mounts" && !regexpMatch(`(?m)^d\s+URL\s`, string(out)) {
				t.Errorf("kubectl get mounts with %v:\n%s", env, out)
			}
			if args[0] == "get" && args[1] == "mount" && !strings.Contains(string(out), `"kind": "Mount"`) {
				t.Errorf("kubectl get mount -o json with %v:\n%s", env, out)
			}
		}
	}
	labelled, err := jsonClient.MountsV1alpha1().Mounts().Get(ctx, "d", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if labelled.Labels["env0"] != "yes" || labelled.Labels["env2"] != "yes" {
		t.Errorf("labels set by kubectl: %v", labelled.Labels)
	}
}

const wait30s = 30 * time.Second

// TestCBORIsOptIn: without the feature gate the server offers no CBOR. A client-go client
// preferring CBOR gets JSON for everything it does (after one 415 for its first CBOR body,
// which client-go answers by sending JSON from then on); a request accepting only CBOR is
// 406, a CBOR body 415, and nothing of the body is parsed.
func TestCBORIsOptIn(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	s := framework.StartInProcess(t, "", apiOnly)
	if _, err := s.Client.MountsV1alpha1().Mounts().Create(ctx, urlMount("a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.ClientsAllowCBOR, true)
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.ClientsPreferCBOR, true)
	seen := &contentTypes{seen: map[string]int{}}
	cfg := rest.CopyConfig(s.Config)
	cfg.Wrap(seen.wrap)
	cborClient, err := clientset.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := cborClient.MountsV1alpha1().Mounts().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// client-go's first CBOR body is refused (415, nothing parsed) and makes the client send
	// JSON from then on; the caller sees that one error, as against any server without CBOR.
	if _, err := cborClient.MountsV1alpha1().Mounts().Create(ctx, urlMount("b"), metav1.CreateOptions{}); !apierrors.IsUnsupportedMediaType(err) {
		t.Fatalf("first create in CBOR: %v, want 415", err)
	}
	created, err := cborClient.MountsV1alpha1().Mounts().Create(ctx, urlMount("b"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create by a client preferring CBOR, again: %v", err)
	}
	select {
	case ev := <-w.ResultChan():
		if m, ok := ev.Object.(*v1alpha1.Mount); !ok || m.Name == "" {
			t.Errorf("watch event: %v %T", ev.Type, ev.Object)
		}
	case <-time.After(wait30s):
		t.Fatal("no watch event")
	}
	got, err := cborClient.MountsV1alpha1().Mounts().Get(ctx, "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(created, got); diff != "" {
		t.Errorf("create and get differ: %s", diff)
	}
	list, err := cborClient.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("list: %v, %d items", err, len(list.Items))
	}
	jsonList, err := s.Client.MountsV1alpha1().Mounts().List(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(jsonList, list); diff != "" {
		t.Errorf("lists of the client preferring CBOR and of the JSON client differ: %s", diff)
	}
	seen.mu.Lock()
	for k, n := range seen.seen {
		if strings.Contains(k, "cbor") { // the 415 is a JSON Status too
			t.Errorf("a server without the gate answered %q %d times", k, n)
		}
	}
	if seen.seen["GET application/json"] == 0 || seen.seen["POST application/json"] == 0 {
		t.Errorf("responses %v, want JSON to GETs and the POST", seen.seen)
	}
	seen.mu.Unlock()

	c, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	do := func(method, path, accept, contentType string, body []byte) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, s.URL+path, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", accept)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header.Get("Content-Type")
	}
	const mountsPath = "/apis/mounts.kcp.io/v1alpha1/mounts"
	if code, ct := do(http.MethodGet, mountsPath, "application/cbor", "", nil); code != http.StatusNotAcceptable {
		t.Errorf("GET accepting only CBOR: %d %q, want 406", code, ct)
	}
	if code, ct := do(http.MethodGet, mountsPath, "application/cbor, application/json;q=0.9", "", nil); code != http.StatusOK || ct != "application/json" {
		t.Errorf("GET preferring CBOR: %d %q, want JSON", code, ct)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	m := urlMount("c")
	m.APIVersion, m.Kind = v1alpha1.SchemeGroupVersion.String(), "Mount"
	var body bytes.Buffer
	if err := cbor.NewSerializer(scheme, scheme).Encode(m, &body); err != nil {
		t.Fatal(err)
	}
	if code, ct := do(http.MethodPost, mountsPath, "application/json", "application/cbor", body.Bytes()); code != http.StatusUnsupportedMediaType {
		t.Errorf("POST of a CBOR body: %d %q, want 415", code, ct)
	}
	if _, err := s.Client.MountsV1alpha1().Mounts().Get(ctx, "c", metav1.GetOptions{}); err == nil {
		t.Error("the Mount of the refused CBOR body exists")
	}
}
