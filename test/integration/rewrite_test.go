package integration

import (
	"bytes"
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
	"github.com/kcp-dev/mount-apiserver/test/integration/framework"
)

// The renames of the rewrite tests: kubevirt.io's VirtualMachine is stored in the target as
// x.virtualization.example.org's PrefixedVirtualMachine, its label and annotation keys under
// x.virtualization.example.org/.
const (
	presentedGroup = "kubevirt.io"
	targetGroup    = "x.virtualization.example.org"
	kindPrefix     = "Prefixed"
)

func renamingMountSpec() *v1alpha1.MountRewrites {
	return &v1alpha1.MountRewrites{
		Groups:              []v1alpha1.GroupRewrite{{Presented: presentedGroup, Target: targetGroup, KindPrefix: kindPrefix}},
		MetadataKeyPrefixes: []v1alpha1.PrefixRewrite{{Presented: presentedGroup + "/", Target: targetGroup + "/"}},
	}
}

// vmCRD is the CRD of the presented API, as its operator installs it.
const vmCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: virtualmachines.kubevirt.io
spec:
  group: kubevirt.io
  scope: Namespaced
  names:
    kind: VirtualMachine
    listKind: VirtualMachineList
    plural: virtualmachines
    singular: virtualmachine
    shortNames: [vm]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - name: Running
      type: boolean
      jsonPath: .spec.running
    schema:
      openAPIV3Schema:
        type: object
        description: A machine that runs virtualized.
        properties:
          spec:
            type: object
            description: What the machine should be.
            properties:
              running:
                type: boolean
                description: Whether the machine runs.
              cpus:
                type: integer
              template:
                type: object
                x-kubernetes-preserve-unknown-fields: true
          status:
            type: object
            properties:
              ready:
                type: boolean
`

// otherGroupsVM is a reference to a VirtualMachine of another group, which is not renamed.
var otherGroupsVM = regexp.MustCompile(`"apiVersion":"other\.example\.com/v1","kind":"VirtualMachine"`)

// recordingHop is a TLS reverse proxy on 127.0.0.1 in front of a real server: it forwards with
// its own client configuration (the caller's credentials are dropped) and records every
// request and response byte that crosses it.
type recordingHop struct {
	URL string
	CA  []byte

	mu       sync.Mutex
	requests []string // "METHOD path?query\nbody"
	response bytes.Buffer
}

func startRecordingHop(t *testing.T, upstream *rest.Config) *recordingHop {
	t.Helper()
	rt, err := rest.TransportFor(upstream)
	if err != nil {
		t.Fatal(err)
	}
	base, err := url.Parse(upstream.Host)
	if err != nil {
		t.Fatal(err)
	}
	hop := &recordingHop{}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(base)
			pr.Out.Host = base.Host
			pr.Out.Header.Del("Authorization")
			var body []byte
			if pr.In.Body != nil {
				body, _ = io.ReadAll(pr.In.Body)
				pr.Out.Body = io.NopCloser(bytes.NewReader(body))
				pr.Out.ContentLength = int64(len(body))
			}
			hop.mu.Lock()
			hop.requests = append(hop.requests, pr.In.Method+" "+pr.In.URL.RequestURI()+"\n"+string(body))
			hop.mu.Unlock()
		},
		Transport:     rt,
		FlushInterval: -1,
		ModifyResponse: func(res *http.Response) error {
			res.Body = struct {
				io.Reader
				io.Closer
			}{io.TeeReader(res.Body, hop), res.Body}
			return nil
		},
	}
	srv := httptest.NewUnstartedServer(proxy)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	hop.URL = srv.URL
	hop.CA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return hop
}

// Write records response bytes.
func (h *recordingHop) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.response.Write(p)
}

// requestsWith returns the recorded requests in which re matches.
func (h *recordingHop) requestsWith(re *regexp.Regexp) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var found []string
	for _, r := range h.requests {
		cleaned := otherGroupsVM.ReplaceAllString(r, "")
		if loc := re.FindStringIndex(cleaned); loc != nil {
			line, _, _ := strings.Cut(r, "\n")
			from, to := max(loc[0]-150, 0), min(loc[1]+150, len(cleaned))
			found = append(found, line+": ..."+cleaned[from:to]+"...")
		}
	}
	return found
}

// responseMatches returns the matches of re in everything that was answered through the hop,
// each with some context.
func (h *recordingHop) responseMatches(re *regexp.Regexp) []string {
	h.mu.Lock()
	data := h.response.String()
	h.mu.Unlock()
	var found []string
	for _, loc := range re.FindAllStringIndex(data, 20) {
		from, to := max(loc[0]-150, 0), min(loc[1]+150, len(data))
		found = append(found, data[from:to])
	}
	return found
}

// presentedInRequests matches presented names in what reaches the target: the group and key
// prefix anywhere, the kind, list kind, resource, singular and short name as JSON strings or
// path segments.
var presentedInRequests = regexp.MustCompile(`kubevirt\.io|"(VirtualMachine|VirtualMachineList|virtualmachines|virtualmachine|vm)"|/(virtualmachines|virtualmachine|vm)(/|\?|$|\n)`)

// targetInResponses matches target names in what reaches the client.
var targetInResponses = regexp.MustCompile(`(?i)x\.virtualization\.example\.org|prefixedvirtualmachine|"prefixedvm"`)

// renamingEnv is a real target kube-apiserver behind a recording hop, mount-apiserver with a
// renaming mount "renamer" of it (the mount's own credentials), and a recording hop in front of
// the mount's proxy for the clients (kubectl and client-go), which authenticates them as the
// standalone admin.
type renamingEnv struct {
	target    *framework.KubeAPIServer
	server    *framework.Server
	targetHop *recordingHop
	clientHop *recordingHop
	// mountConfig reaches the target through clientHop and the mount; kubeconfig is it for kubectl.
	mountConfig *rest.Config
	kubeconfig  string
	kubectlBin  string
}

func startRenamingEnv(ctx context.Context, t *testing.T) *renamingEnv {
	t.Helper()
	return startRenamingEnvWith(ctx, t, apiOnly)
}

func startRenamingEnvWith(ctx context.Context, t *testing.T, modify func(*options.Options)) *renamingEnv {
	t.Helper()
	target, err := framework.StartKubeAPIServer(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(target.Stop)
	env := &renamingEnv{target: target, kubectlBin: realKubectl(t)}
	env.targetHop = startRecordingHop(t, target.AdminConfig)
	env.server = framework.StartInProcess(t, "", modify)

	kubeconfig, err := framework.KubeconfigBytes(&rest.Config{Host: env.targetHop.URL, BearerToken: "the-hop-drops-it", TLSClientConfig: rest.TLSClientConfig{CAData: env.targetHop.CA}})
	if err != nil {
		t.Fatal(err)
	}
	core, err := kubernetes.NewForConfig(env.server.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "target"}, Data: map[string][]byte{"kubeconfig": kubeconfig}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m := &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "renamer"}, Spec: v1alpha1.MountSpec{
		Ref:      v1alpha1.ObjectReference{Namespace: "clusters", Name: "target"},
		Identity: v1alpha1.MountIdentity{Mode: v1alpha1.IdentityModeMountCredentials},
		Rewrites: renamingMountSpec(),
	}}
	if _, err := env.server.Client.MountsV1alpha1().Mounts().Create(ctx, m, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	env.clientHop = startRecordingHop(t, env.server.Config)
	env.mountConfig = &rest.Config{
		Host:            env.clientHop.URL + "/apis/mounts.kcp.io/v1alpha1/mounts/renamer/proxy",
		BearerToken:     "the-hop-drops-it",
		TLSClientConfig: rest.TLSClientConfig{CAData: env.clientHop.CA},
		QPS:             1000,
		Burst:           2000,
	}
	data, err := framework.KubeconfigBytes(env.mountConfig)
	if err != nil {
		t.Fatal(err)
	}
	env.kubeconfig = filepath.Join(t.TempDir(), "through-mount.kubeconfig")
	if err := os.WriteFile(env.kubeconfig, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return env
}

// mountUID reads the renaming mount's UID.
func (e *renamingEnv) mountUID(ctx context.Context, t *testing.T) types.UID {
	t.Helper()
	m, err := e.server.Client.MountsV1alpha1().Mounts().Get(ctx, "renamer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return m.UID
}

// kubectl runs kubectl through the mount (kubeconfig "") or with another kubeconfig.
func (e *renamingEnv) kubectl(t *testing.T, kubeconfig, stdin string, env []string, args ...string) (string, error) {
	t.Helper()
	if kubeconfig == "" {
		kubeconfig = e.kubeconfig
	}
	cmd := exec.Command(e.kubectlBin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (e *renamingEnv) mustKubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, err := e.kubectl(t, "", stdin, nil, args...)
	if err != nil {
		t.Fatalf("kubectl %s through the mount: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func (e *renamingEnv) mustKubectlTarget(t *testing.T, args ...string) string {
	t.Helper()
	out, err := e.kubectl(t, e.target.AdminKubeconfig, "", nil, args...)
	if err != nil {
		t.Fatalf("kubectl %s on the target: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// waitEstablished waits, through the mount, until the CRD is established.
func (e *renamingEnv) waitEstablished(t *testing.T) {
	t.Helper()
	e.mustKubectl(t, "", "wait", "--for=condition=Established", "crd/virtualmachines.kubevirt.io", "--timeout=60s")
}

// checkNoLeaks asserts that no presented name reached the target and no target name reached
// the client.
func (e *renamingEnv) checkNoLeaks(t *testing.T) {
	t.Helper()
	for _, r := range e.targetHop.requestsWith(presentedInRequests) {
		t.Errorf("a presented name reached the target:\n%.2000s", r)
	}
	for _, m := range e.clientHop.responseMatches(targetInResponses) {
		t.Errorf("a target name reached the client: ...%s...", m)
	}
}

func expectContains(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s: %q missing in\n%s", what, want, out)
		}
	}
}

// TestRenamingMountKubectl installs a CRD and objects through a renaming mount with the real
// kubectl (apply, server-side apply, edit, three kinds of patch, -w, explain, api-resources)
// and sees presented names through the mount, target names on the target, and no name
// crossing to the wrong side on either recording hop.
func TestRenamingMountKubectl(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := startRenamingEnv(ctx, t)

	e.mustKubectl(t, vmCRD, "apply", "-f", "-")
	e.waitEstablished(t)
	onTarget := e.mustKubectlTarget(t, "get", "crd", "-o", "custom-columns=NAME:.metadata.name,GROUP:.spec.group,KIND:.spec.names.kind,LIST:.spec.names.listKind,SHORT:.spec.names.shortNames[*]", "--no-headers")
	expectContains(t, "the CRD on the target", onTarget, "prefixedvirtualmachines.x.virtualization.example.org", "PrefixedVirtualMachine ", "PrefixedVirtualMachineList", "prefixedvm")

	// api-resources reads aggregated discovery; kubectl caches it per server URL in its own
	// cache directory, so the mount's presented view is never mixed with the target's.
	out := e.mustKubectl(t, "", "api-resources", "--api-group=kubevirt.io", "--no-headers")
	if !regexpMatch(`(?m)^virtualmachines\s+vm\s+kubevirt.io/v1\s+true\s+VirtualMachine\s*$`, out) {
		t.Errorf("api-resources through the mount:\n%s", out)
	}
	if out := e.mustKubectl(t, "", "api-resources", "--no-headers"); strings.Contains(out, targetGroup) {
		t.Errorf("the target group is visible through the mount:\n%s", out)
	}
	out = e.mustKubectlTarget(t, "api-resources", "--api-group="+targetGroup, "--no-headers")
	if !regexpMatch(`(?m)^prefixedvirtualmachines\s+prefixedvm\s+x.virtualization.example.org/v1\s+true\s+PrefixedVirtualMachine\s*$`, out) {
		t.Errorf("api-resources on the target:\n%s", out)
	}

	// Client-side apply, with a renamed label, annotation and finalizer key.
	e.mustKubectl(t, "", "create", "namespace", "vms")
	e.mustKubectl(t, `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: alpine
  namespace: vms
  labels:
    kubevirt.io/os: alpine
    app: demo
  annotations:
    kubevirt.io/owner: team-a
spec:
  running: false
  cpus: 1
`, "apply", "-f", "-")
	out = e.mustKubectl(t, "", "get", "vm", "-n", "vms", "alpine", "-o", "yaml")
	expectContains(t, "kubectl get -o yaml through the mount", out, "apiVersion: kubevirt.io/v1", "kind: VirtualMachine", "kubevirt.io/os: alpine", "kubevirt.io/owner: team-a")
	out = e.mustKubectlTarget(t, "get", "prefixedvirtualmachines."+targetGroup, "-n", "vms", "alpine", "-o", "yaml")
	expectContains(t, "kubectl get -o yaml on the target", out, "apiVersion: x.virtualization.example.org/v1", "kind: PrefixedVirtualMachine", "x.virtualization.example.org/os: alpine", "x.virtualization.example.org/owner: team-a")

	// Tables (printer columns), label selectors naming renamed keys, short names.
	out = e.mustKubectl(t, "", "get", "vm", "-n", "vms", "-l", "kubevirt.io/os=alpine")
	if !regexpMatch(`(?m)^alpine\s+false\s+`, out) {
		t.Errorf("kubectl get vm -l kubevirt.io/os=alpine:\n%s", out)
	}
	if out := e.mustKubectl(t, "", "get", "virtualmachines.kubevirt.io", "-A", "-l", "kubevirt.io/os=other", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("a selector that matches nothing: %s", out)
	}

	// Apply again (a three-way patch), then the three kinds of patch.
	e.mustKubectl(t, `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: alpine
  namespace: vms
  labels:
    kubevirt.io/os: alpine-3
spec:
  running: true
  cpus: 2
`, "apply", "-f", "-")
	e.mustKubectl(t, "", "patch", "vm", "-n", "vms", "alpine", "--type=json", "-p", `[{"op":"add","path":"/metadata/labels/kubevirt.io~1tier","value":"gold"},{"op":"replace","path":"/spec/cpus","value":4}]`)
	e.mustKubectl(t, "", "patch", "vm", "-n", "vms", "alpine", "--type=merge", "-p", `{"metadata":{"annotations":{"kubevirt.io/note":"merged"}}}`)
	out = e.mustKubectlTarget(t, "get", "prefixedvirtualmachines."+targetGroup, "-n", "vms", "alpine", "-o", "jsonpath={.metadata.labels}{.metadata.annotations}{.spec}")
	expectContains(t, "patched object on the target", out, `"x.virtualization.example.org/os":"alpine-3"`, `"x.virtualization.example.org/tier":"gold"`, `"x.virtualization.example.org/note":"merged"`, `"cpus":4`, `"running":true`)
	// Strategic merge patches apply to built-in kinds: a ConfigMap's renamed label.
	e.mustKubectl(t, "", "create", "configmap", "-n", "vms", "settings", "--from-literal=a=b")
	e.mustKubectl(t, "", "patch", "configmap", "-n", "vms", "settings", "--type=strategic", "-p", `{"metadata":{"labels":{"kubevirt.io/os":"alpine"}}}`)
	out = e.mustKubectlTarget(t, "get", "configmap", "-n", "vms", "settings", "-o", "jsonpath={.metadata.labels}")
	expectContains(t, "strategic merge patch on the target", out, `"x.virtualization.example.org/os":"alpine"`)
	out = e.mustKubectl(t, "", "get", "configmap", "-n", "vms", "-l", "kubevirt.io/os", "-o", "name")
	expectContains(t, "ConfigMaps selected by a renamed key", out, "configmap/settings")

	// Server-side apply: managedFields name presented keys through the mount.
	e.mustKubectl(t, `apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: fedora
  namespace: vms
  labels:
    kubevirt.io/os: fedora
spec:
  running: true
  cpus: 8
`, "apply", "--server-side", "--field-manager=vm-operator", "-f", "-")
	out = e.mustKubectl(t, "", "get", "vm", "-n", "vms", "fedora", "-o", "yaml", "--show-managed-fields")
	expectContains(t, "server-side applied object through the mount", out, "manager: vm-operator", "f:kubevirt.io/os: {}", "apiVersion: kubevirt.io/v1")

	// edit, with an editor that changes the YAML it is given.
	editor := filepath.Join(t.TempDir(), "editor.sh")
	if err := os.WriteFile(editor, []byte("#!/bin/sh\nsed -i 's/cpus: 8/cpus: 16/; s#kubevirt.io/os: fedora#kubevirt.io/os: fedora-41#' \"$1\"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := e.kubectl(t, "", "", []string{"KUBE_EDITOR=" + editor}, "edit", "vm", "-n", "vms", "fedora"); err != nil || !strings.Contains(out, "edited") {
		t.Fatalf("kubectl edit: %v\n%s", err, out)
	}
	out = e.mustKubectlTarget(t, "get", "prefixedvirtualmachines."+targetGroup, "-n", "vms", "fedora", "-o", "jsonpath={.metadata.labels}{.spec.cpus}")
	expectContains(t, "edited object on the target", out, `"x.virtualization.example.org/os":"fedora-41"`, "16")

	// explain reads the presented OpenAPI.
	out = e.mustKubectl(t, "", "explain", "virtualmachines.spec.running")
	expectContains(t, "kubectl explain through the mount", out, "GROUP:      kubevirt.io", "KIND:       VirtualMachine", "Whether the machine runs.")

	// -w: a change made on the target arrives in presented names.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watch := exec.CommandContext(watchCtx, e.kubectlBin, "--kubeconfig", e.kubeconfig, "get", "vm", "-n", "vms", "-w", "-o", "jsonpath={.kind} {.metadata.name} {.metadata.labels}{\"\\n\"}")
	var watched syncBuffer
	watch.Stdout, watch.Stderr = &watched, &watched
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopWatch(); _ = watch.Wait() })
	waitFor(ctx, t, "the watch lists the machines", func() bool { return strings.Contains(watched.String(), "fedora") })
	e.mustKubectlTarget(t, "label", "prefixedvirtualmachines."+targetGroup, "-n", "vms", "alpine", targetGroup+"/watched=yes")
	waitFor(ctx, t, "the watch shows the change", func() bool { return strings.Contains(watched.String(), `"kubevirt.io/watched":"yes"`) })
	stopWatch()
	expectContains(t, "kubectl get -w through the mount", watched.String(), "VirtualMachine alpine")

	// Errors name presented resources.
	out, err := e.kubectl(t, "", "", nil, "get", "vm", "-n", "vms", "missing")
	if err == nil || !strings.Contains(out, `virtualmachines.kubevirt.io "missing" not found`) {
		t.Errorf("a missing object through the mount: %v\n%s", err, out)
	}
	// The target's own names are not reachable through the mount.
	if out, err := e.kubectl(t, "", "", nil, "get", "--raw", "/apis/"+targetGroup+"/v1/namespaces/vms/prefixedvirtualmachines"); err == nil || !strings.Contains(out, "NotFound") {
		t.Errorf("the target group through the mount: %v\n%s", err, out)
	}
	// Without the admission relay, webhooks registered through the mount would see target
	// names: refused.
	out, err = e.kubectl(t, "", `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: vm-policy
webhooks:
- name: cpus.vms.example.com
  clientConfig: {url: "https://127.0.0.1:1/validate"}
  rules: [{apiGroups: [kubevirt.io], apiVersions: [v1], resources: [virtualmachines], operations: [CREATE]}]
  sideEffects: None
  admissionReviewVersions: [v1]
`, nil, "create", "-f", "-")
	if err == nil || !strings.Contains(out, "this server has no admission relay") {
		t.Errorf("a webhook configuration through a renaming mount without the relay: %v\n%s", err, out)
	}
	// Protobuf bodies of renamed resources are refused with a clear Status.
	e.checkProtobufRefused(ctx, t)

	e.mustKubectl(t, "", "delete", "vm", "-n", "vms", "alpine", "fedora")
	if out := e.mustKubectlTarget(t, "get", "prefixedvirtualmachines."+targetGroup, "-A", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Errorf("deleted through the mount, still on the target: %s", out)
	}
	e.checkNoLeaks(t)
}

// checkProtobufRefused sends a protobuf body for a renamed resource: 415 with a Status.
func (e *renamingEnv) checkProtobufRefused(ctx context.Context, t *testing.T) {
	t.Helper()
	c, err := rest.HTTPClientFor(e.mountConfig)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.mountConfig.Host+"/apis/kubevirt.io/v1/namespaces/vms/virtualmachines", strings.NewReader("k8s\x00\x0a\x02"))
	req.Header.Set("Content-Type", "application/vnd.kubernetes.protobuf")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(string(body), `"kind":"Status"`) || !strings.Contains(string(body), "application/vnd.kubernetes.protobuf") {
		t.Errorf("protobuf body for a renamed resource: %d %s", res.StatusCode, body)
	}
	// A compressed body would pass unread: refused.
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, e.mountConfig.Host+"/apis/kubevirt.io/v1/namespaces/vms/virtualmachines", strings.NewReader("\x1f\x8b compressed"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "gzip")
	if res, err = c.Do(req); err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusUnsupportedMediaType || !strings.Contains(string(body), "without Content-Encoding") {
		t.Errorf("a gzip body for a renamed resource: %d %s", res.StatusCode, body)
	}
	// So is a body beyond what is rewritten.
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, e.mountConfig.Host+"/apis/kubevirt.io/v1/namespaces/vms/virtualmachines", strings.NewReader(`{"a":"`+strings.Repeat("x", 4<<20)+`"}`))
	req.Header.Set("Content-Type", "application/json")
	if res, err = c.Do(req); err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a 4 MiB body for a renamed resource: %d", res.StatusCode)
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func waitFor(ctx context.Context, t *testing.T, what string, ok func() bool) {
	t.Helper()
	for !ok() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting until %s: %v", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestRenamingMountClientGo runs what a controller does, with the dynamic client and an
// informer, through a renaming mount: create, update, status update, merge and JSON patch,
// server-side apply, ownerReferences (to the renamed kind, and to a kind of the same name in
// another group, which stays as it is), a watch with bookmarks, delete with options; the
// objects arrive in presented names, are stored in target names, and no name crosses to the
// wrong side.
func TestRenamingMountClientGo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := startRenamingEnv(ctx, t)
	e.mustKubectl(t, vmCRD, "apply", "-f", "-")
	e.waitEstablished(t)
	e.mustKubectl(t, "", "create", "namespace", "ctrl")

	dyn, err := dynamic.NewForConfig(e.mountConfig)
	if err != nil {
		t.Fatal(err)
	}
	vms := dyn.Resource(schema.GroupVersionResource{Group: presentedGroup, Version: "v1", Resource: "virtualmachines"}).Namespace("ctrl")
	targetVMs := dynamic.NewForConfigOrDie(e.target.AdminConfig).Resource(schema.GroupVersionResource{Group: targetGroup, Version: "v1", Resource: "prefixedvirtualmachines"}).Namespace("ctrl")

	// The informer of a controller, started before the objects exist.
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, "ctrl", nil)
	informer := factory.ForResource(schema.GroupVersionResource{Group: presentedGroup, Version: "v1", Resource: "virtualmachines"}).Informer()
	var seen syncBuffer
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { fmt.Fprintf(&seen, "add %s\n", describe(obj)) },
		UpdateFunc: func(_, obj any) { fmt.Fprintf(&seen, "update %s\n", describe(obj)) },
		DeleteFunc: func(obj any) { fmt.Fprintf(&seen, "delete %s\n", describe(obj)) },
	}); err != nil {
		t.Fatal(err)
	}
	informerCtx, stopInformer := context.WithCancel(ctx)
	defer stopInformer()
	factory.Start(informerCtx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the informer did not sync through the mount")
	}

	vm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": "web", "labels": map[string]any{"kubevirt.io/os": "alpine"}, "finalizers": []any{"kubevirt.io/protect"}},
		"spec":     map[string]any{"running": false, "cpus": int64(1)},
	}}
	created, err := vms.Create(ctx, vm, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if created.GetAPIVersion() != "kubevirt.io/v1" || created.GetKind() != "VirtualMachine" || created.GetLabels()["kubevirt.io/os"] != "alpine" || created.GetFinalizers()[0] != "kubevirt.io/protect" {
		t.Errorf("created object as the client sees it: %v", created.Object)
	}
	stored, err := targetVMs.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the object on the target: %v", err)
	}
	if stored.GetKind() != "PrefixedVirtualMachine" || stored.GetLabels()[targetGroup+"/os"] != "alpine" || stored.GetFinalizers()[0] != targetGroup+"/protect" {
		t.Errorf("stored object on the target: %v", stored.Object)
	}

	// Update and status update.
	_ = unstructured.SetNestedField(created.Object, int64(2), "spec", "cpus")
	updated, err := vms.Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	_ = unstructured.SetNestedField(updated.Object, true, "status", "ready")
	if _, err := vms.UpdateStatus(ctx, updated, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("status update: %v", err)
	}
	// Patches: merge and JSON patch naming renamed keys.
	if _, err := vms.Patch(ctx, "web", types.MergePatchType, []byte(`{"metadata":{"labels":{"kubevirt.io/tier":"gold"}},"spec":{"running":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("merge patch: %v", err)
	}
	if _, err := vms.Patch(ctx, "web", types.JSONPatchType, []byte(`[{"op":"test","path":"/metadata/labels/kubevirt.io~1tier","value":"gold"},{"op":"add","path":"/metadata/annotations","value":{"kubevirt.io/by":"json-patch"}}]`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("JSON patch: %v", err)
	}
	// Server-side apply of another object by a controller.
	applied, err := vms.Apply(ctx, "db", &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
		"metadata": map[string]any{"name": "db", "labels": map[string]any{"kubevirt.io/os": "fedora"}},
		"spec":     map[string]any{"cpus": int64(4)},
	}}, metav1.ApplyOptions{FieldManager: "vm-controller", Force: true})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	if mf := applied.GetManagedFields(); len(mf) == 0 || mf[0].APIVersion != "kubevirt.io/v1" || !strings.Contains(string(mf[0].FieldsV1.Raw), `"f:kubevirt.io/os"`) {
		t.Errorf("managedFields through the mount: %+v", mf)
	}

	// ownerReferences: to the renamed kind, and to a VirtualMachine of another group.
	web, err := vms.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if web.GetLabels()["kubevirt.io/tier"] != "gold" || web.GetAnnotations()["kubevirt.io/by"] != "json-patch" || !nestedBool(web, "status", "ready") || !nestedBool(web, "spec", "running") {
		t.Errorf("after update, status update and patches: %v", web.Object)
	}
	core, err := kubernetes.NewForConfig(e.mountConfig)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "web-config", OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "kubevirt.io/v1", Kind: "VirtualMachine", Name: "web", UID: web.GetUID()},
		{APIVersion: "other.example.com/v1", Kind: "VirtualMachine", Name: "web", UID: "00000000-0000-0000-0000-000000000001"},
	}}}
	if _, err := core.CoreV1().ConfigMaps("ctrl").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a ConfigMap owned by the machine: %v", err)
	}
	storedCM, err := e.target.Client.CoreV1().ConfigMaps("ctrl").Get(ctx, "web-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if refs := storedCM.OwnerReferences; len(refs) != 2 || refs[0].APIVersion != targetGroup+"/v1" || refs[0].Kind != "PrefixedVirtualMachine" || refs[1].APIVersion != "other.example.com/v1" || refs[1].Kind != "VirtualMachine" {
		t.Errorf("ownerReferences on the target: %+v", refs)
	}
	gotCM, err := core.CoreV1().ConfigMaps("ctrl").Get(ctx, "web-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if refs := gotCM.OwnerReferences; len(refs) != 2 || refs[0].APIVersion != "kubevirt.io/v1" || refs[0].Kind != "VirtualMachine" || refs[1].APIVersion != "other.example.com/v1" {
		t.Errorf("ownerReferences through the mount: %+v", refs)
	}

	// A watch with bookmarks: the initial events end with a BOOKMARK in presented names.
	w, err := vms.Watch(ctx, metav1.ListOptions{AllowWatchBookmarks: true, SendInitialEvents: ptr.To(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	var events []string
	for ev := range w.ResultChan() {
		obj, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			t.Fatalf("watch event %s of %T: %v", ev.Type, ev.Object, ev.Object)
		}
		events = append(events, fmt.Sprintf("%s %s %s %s", ev.Type, obj.GetAPIVersion(), obj.GetKind(), obj.GetName()))
		if ev.Type == watch.Bookmark {
			break
		}
	}
	w.Stop()
	if got := strings.Join(events, ", "); got != "ADDED kubevirt.io/v1 VirtualMachine db, ADDED kubevirt.io/v1 VirtualMachine web, BOOKMARK kubevirt.io/v1 VirtualMachine " {
		t.Errorf("watch with bookmarks: %s", got)
	}

	// Delete with options (a precondition), after the controller drops its finalizer.
	if _, err := vms.Patch(ctx, "web", types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/finalizers"}]`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("removing the finalizer: %v", err)
	}
	uid := web.GetUID()
	if err := vms.Delete(ctx, "web", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}, PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := vms.Delete(ctx, "db", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	waitFor(ctx, t, "the informer sees both deletions", func() bool { return strings.Count(seen.String(), "delete ") == 2 })
	stopInformer()
	for _, line := range strings.Split(strings.TrimSpace(seen.String()), "\n") {
		if !strings.Contains(line, " kubevirt.io/v1 VirtualMachine ") {
			t.Errorf("informer event not in presented names: %s", line)
		}
	}
	expectContains(t, "informer events", seen.String(), "add kubevirt.io/v1 VirtualMachine web", "update kubevirt.io/v1 VirtualMachine web", "add kubevirt.io/v1 VirtualMachine db", "delete kubevirt.io/v1 VirtualMachine web")
	e.checkNoLeaks(t)
}

func describe(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return fmt.Sprintf("%T", obj)
	}
	return fmt.Sprintf("%s %s %s", u.GetAPIVersion(), u.GetKind(), u.GetName())
}

func nestedBool(u *unstructured.Unstructured, fields ...string) bool {
	v, _, _ := unstructured.NestedBool(u.Object, fields...)
	return v
}

// TestRenamingMountPodsLogsExec: with a key prefix rule every core request goes through the
// rewriter; a Pod's renamed label is stored under the target key, while logs and exec (a
// text stream and an upgrade, through a second renaming mount without recording hops, which
// carry no upgrades) pass as they are, through the framework's kubelet on the target.
func TestRenamingMountPodsLogsExec(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := startRenamingEnv(ctx, t)
	kubelet, err := framework.StartKubelet(ctx, e.target, "renaming-node")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Stop)
	if err := kubelet.CreatePod(ctx, "apps", "app"); err != nil {
		t.Fatal(err)
	}
	e.mustKubectl(t, "", "label", "pod", "-n", "apps", "app", "kubevirt.io/os=alpine")
	out := e.mustKubectlTarget(t, "get", "pod", "-n", "apps", "app", "-o", "jsonpath={.metadata.labels}")
	expectContains(t, "the pod's label on the target", out, `"x.virtualization.example.org/os":"alpine"`)
	out = e.mustKubectl(t, "", "get", "pods", "-n", "apps", "-l", "kubevirt.io/os=alpine", "-o", "name")
	expectContains(t, "pods selected by a renamed key through the mount", out, "pod/app")
	out = e.mustKubectl(t, "", "logs", "-n", "apps", "app")
	expectContains(t, "kubectl logs through the mount", out, "log line 1")
	// The recording hops carry no upgrades: exec goes from kubectl to mount-apiserver and
	// through a second renaming mount straight to the target.
	targetKubeconfig, err := framework.KubeconfigBytes(e.target.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	core, err := kubernetes.NewForConfig(e.server.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := core.CoreV1().Secrets("clusters").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "direct"}, Data: map[string][]byte{"kubeconfig": targetKubeconfig}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.server.Client.MountsV1alpha1().Mounts().Create(ctx, &v1alpha1.Mount{ObjectMeta: metav1.ObjectMeta{Name: "direct"}, Spec: v1alpha1.MountSpec{
		Ref:      v1alpha1.ObjectReference{Namespace: "clusters", Name: "direct"},
		Identity: v1alpha1.MountIdentity{Mode: v1alpha1.IdentityModeMountCredentials},
		Rewrites: renamingMountSpec(),
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	direct := rest.CopyConfig(e.server.Config)
	direct.Host += "/apis/mounts.kcp.io/v1alpha1/mounts/direct/proxy"
	data, err := framework.KubeconfigBytes(direct)
	if err != nil {
		t.Fatal(err)
	}
	directKubeconfig := filepath.Join(t.TempDir(), "direct.kubeconfig")
	if err := os.WriteFile(directKubeconfig, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = e.kubectl(t, directKubeconfig, "", nil, "exec", "-n", "apps", "app", "--", "sh", "-c", "echo exec-through-renaming-mount")
	if err != nil || !strings.Contains(out, "exec-through-renaming-mount") {
		t.Errorf("kubectl exec through the mount: %v\n%s", err, out)
	}
	e.checkNoLeaks(t)
}
