package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/kcp-dev/mount-apiserver/pkg/cmd/server/options"
)

// Names from artifacts/apiservice.
const (
	Namespace      = "mount-apiserver"
	ServiceAccount = "mount-apiserver"
	APIServiceName = "v1alpha1.mounts.kcp.io"
)

// Aggregated is a mount-apiserver registered into a KubeAPIServer with the RBAC and APIService
// of artifacts/apiservice. The Deployment cannot run here, so the server runs in this process
// on 127.0.0.1 and the Service is an ExternalName "localhost" Service instead.
type Aggregated struct {
	Kube    *KubeAPIServer
	Mount   *Server
	RootDir string
	// AuditLog is mount-apiserver's audit log (level Metadata for every request).
	AuditLog string
	// Kubeconfig is the mount-apiserver service account's, which the server runs with.
	Kubeconfig string

	// Pid is mount-apiserver's process id when it runs as its own process
	// (StartAggregatedProcess), else 0.
	Pid int

	port   int
	modify func(*options.Options)
	// binary and args run mount-apiserver as its own process instead of in this one.
	binary string
	args   []string
}

// StartAggregated applies the bundle, starts mount-apiserver as the bundle's service account
// and waits until the APIService is Available. modify may adjust the server's options.
func StartAggregated(ctx context.Context, kube *KubeAPIServer, dir string, modify func(*options.Options)) (*Aggregated, error) {
	a := &Aggregated{Kube: kube, RootDir: filepath.Join(dir, "mount-apiserver"), AuditLog: filepath.Join(dir, "mount-apiserver-audit.log"), modify: modify}
	if err := a.startNew(ctx, dir); err != nil {
		return nil, err
	}
	return a, nil
}

// StartAggregatedProcess is StartAggregated with mount-apiserver as its own process (the
// binary bin, e.g. from BuildMountAPIServer), so that what it spends is measured apart from
// the caller's; args are added to the flags StartAggregated would set (a later flag wins).
func StartAggregatedProcess(ctx context.Context, kube *KubeAPIServer, dir, bin string, args ...string) (*Aggregated, error) {
	a := &Aggregated{Kube: kube, RootDir: filepath.Join(dir, "mount-apiserver"), AuditLog: filepath.Join(dir, "mount-apiserver-audit.log"), binary: bin, args: args}
	if err := a.startNew(ctx, dir); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Aggregated) startNew(ctx context.Context, dir string) error {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	a.port = listener.Addr().(*net.TCPAddr).Port
	if err := a.applyBundle(ctx); err != nil {
		listener.Close()
		return err
	}
	if a.Kubeconfig, err = a.serviceAccountKubeconfig(ctx); err != nil {
		listener.Close()
		return err
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"), 0o600); err != nil {
		listener.Close()
		return err
	}
	return a.start(ctx, listener, policy)
}

func (a *Aggregated) start(ctx context.Context, listener net.Listener, policy string) error {
	if a.binary != "" {
		listener.Close() // the process listens on the port itself
		args := append([]string{"--kubeconfig", a.Kubeconfig, "--apiservice-name", APIServiceName,
			"--audit-log-path", a.AuditLog, "--audit-policy-file", policy}, a.args...)
		s, pid, err := startProcess(ctx, a.binary, a.RootDir, a.port, args)
		if err != nil {
			return err
		}
		a.Mount, a.Pid = s, pid
		return a.WaitAvailable(ctx)
	}
	s, err := StartServer(ctx, a.RootDir, listener, func(o *options.Options) {
		o.Kubeconfig = a.Kubeconfig
		o.APIServiceName = APIServiceName
		o.Audit.LogOptions.Path = a.AuditLog
		o.Audit.PolicyFile = policy
		if a.modify != nil {
			a.modify(o)
		}
	})
	if err != nil {
		return err
	}
	a.Mount = s
	return a.WaitAvailable(ctx)
}

// Restart stops mount-apiserver and starts it again on the same port and root directory.
func (a *Aggregated) Restart(ctx context.Context) error {
	if err := a.Mount.Stop(); err != nil {
		return fmt.Errorf("stopping mount-apiserver: %w", err)
	}
	listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", a.port))
	if err != nil {
		return fmt.Errorf("listening again on port %d: %w", a.port, err)
	}
	return a.start(ctx, listener, filepath.Join(filepath.Dir(a.AuditLog), "audit-policy.yaml"))
}

// Stop stops mount-apiserver.
func (a *Aggregated) Stop() error { return a.Mount.Stop() }

// WaitAvailable waits until the APIService's Available condition is True.
func (a *Aggregated) WaitAvailable(ctx context.Context) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		raw, err := a.Kube.Client.Discovery().RESTClient().Get().AbsPath("/apis/apiregistration.k8s.io/v1/apiservices/" + APIServiceName).DoRaw(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw); err != nil {
			return false, err
		}
		conditions, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conditions {
			c, _ := c.(map[string]any)
			if c["type"] == "Available" {
				last = fmt.Sprintf("%v: %v", c["reason"], c["message"])
				return c["status"] == "True", nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("APIService %s not Available (last: %s): %w", APIServiceName, last, err)
	}
	return nil
}

// applyBundle renders artifacts/apiservice with kubectl kustomize and applies every object
// but the Deployment and its volume claim; the Service becomes an ExternalName Service for
// localhost and the APIService points at the server's port.
func (a *Aggregated) applyBundle(ctx context.Context) error {
	bin, err := KubeBinDir()
	if err != nil {
		return err
	}
	rendered, err := exec.CommandContext(ctx, filepath.Join(bin, "kubectl"), "kustomize", filepath.Join(RepoRoot(), "artifacts", "apiservice")).Output()
	if err != nil {
		var exitErr *exec.ExitError
		if errors.As(err, &exitErr) {
			return fmt.Errorf("kubectl kustomize artifacts/apiservice: %w: %s", err, exitErr.Stderr)
		}
		return fmt.Errorf("kubectl kustomize artifacts/apiservice: %w", err)
	}

	dyn, err := dynamic.NewForConfig(a.Kube.AdminConfig)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(a.Kube.Client.Discovery()))
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("decoding bundle: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		switch obj.GetKind() {
		case "Deployment", "PersistentVolumeClaim":
			continue
		case "Service":
			if err := unstructured.SetNestedField(obj.Object, "ExternalName", "spec", "type"); err != nil {
				return err
			}
			if err := unstructured.SetNestedField(obj.Object, "localhost", "spec", "externalName"); err != nil {
				return err
			}
			unstructured.RemoveNestedField(obj.Object, "spec", "selector")
		case "APIService":
			// The aggregator dials <externalName>:<spec.service.port> for ExternalName Services.
			if err := unstructured.SetNestedField(obj.Object, int64(a.port), "spec", "service", "port"); err != nil {
				return err
			}
		}
		mapping, err := mapper.RESTMapping(obj.GroupVersionKind().GroupKind(), obj.GroupVersionKind().Version)
		if err != nil {
			return fmt.Errorf("mapping %s: %w", obj.GroupVersionKind(), err)
		}
		data, err := obj.MarshalJSON()
		if err != nil {
			return err
		}
		_, err = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: "integration-test", Force: ptr.To(true)})
		if err != nil {
			return fmt.Errorf("applying %s %s/%s: %w", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
	}
}

// serviceAccountKubeconfig requests a token of the bundle's service account and writes a
// kubeconfig with it: the server then runs with exactly the bundle's RBAC.
func (a *Aggregated) serviceAccountKubeconfig(ctx context.Context) (string, error) {
	tr, err := a.Kube.Client.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, ServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for %s/%s: %w", Namespace, ServiceAccount, err)
	}
	return a.Kube.WriteKubeconfig(&rest.Config{
		Host:            a.Kube.URL,
		BearerToken:     tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: a.Kube.ClientCA.CertPEM},
	}, "mount-apiserver-sa")
}

// ApplyBundle applies artifacts/apiservice to kube with the APIService pointing at
// localhost:port, and returns the kubeconfig of the bundle's service account: for callers
// that run the server processes themselves (bench commands), which then wait with
// WaitAPIServiceAvailable.
func ApplyBundle(ctx context.Context, kube *KubeAPIServer, port int) (string, error) {
	a := &Aggregated{Kube: kube, port: port}
	if err := a.applyBundle(ctx); err != nil {
		return "", err
	}
	return a.serviceAccountKubeconfig(ctx)
}

// WaitAPIServiceAvailable waits until the APIService of the bundle is Available in kube.
func WaitAPIServiceAvailable(ctx context.Context, kube *KubeAPIServer) error {
	return (&Aggregated{Kube: kube}).WaitAvailable(ctx)
}

// DirectConfig returns cfg aimed at mount-apiserver itself instead of the kube-apiserver: same
// credentials, the server's URL and CA.
func (a *Aggregated) DirectConfig(cfg *rest.Config) *rest.Config {
	direct := rest.CopyConfig(cfg)
	direct.Host = a.Mount.URL
	direct.CAData = a.Mount.CAData
	return direct
}

// StartAggregatedBinary is StartAggregated with the test's built binary as its own process: args
// are extra flags (e.g. -v=10), its output is in the Process's LogPath, and its audit policy
// logs every request at auditLevel (Metadata, Request or RequestResponse). Restart would
// start the server in this process instead; tests of such an Aggregated do not call it.
func StartAggregatedBinary(ctx context.Context, t testing.TB, kube *KubeAPIServer, bin Binary, auditLevel string, args ...string) (*Aggregated, *Process) {
	t.Helper()
	dir := t.TempDir()
	a := &Aggregated{Kube: kube, RootDir: filepath.Join(dir, "mount-apiserver"), AuditLog: filepath.Join(dir, "mount-apiserver-audit.log")}
	var err error
	if a.port, err = FreePort(); err != nil {
		t.Fatal(err)
	}
	if err := a.applyBundle(ctx); err != nil {
		t.Fatal(err)
	}
	if a.Kubeconfig, err = a.serviceAccountKubeconfig(ctx); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: "+auditLevel+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := bin.StartOnPort(t, a.RootDir, a.port, append([]string{
		"--kubeconfig", a.Kubeconfig, "--apiservice-name", APIServiceName,
		"--audit-log-path", a.AuditLog, "--audit-policy-file", policy,
	}, args...)...)
	a.Mount = p.Server
	if err := a.WaitAvailable(ctx); err != nil {
		t.Fatal(err)
	}
	return a, p
}
