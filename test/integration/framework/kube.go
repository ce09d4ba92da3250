package framework

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/embeddedetcd"
	"github.com/kcp-dev/mount-apiserver/pkg/pki"
)

// RepoRoot is the root of this repository.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

var (
	kubeBinOnce sync.Once
	kubeBinDir  string
	kubeBinErr  error
)

// KubeBinDir returns the directory of the real kube-apiserver, kubectl and etcd binaries,
// building them with hack/kube-binaries.sh the first time (minutes cold, instant after).
func KubeBinDir() (string, error) {
	kubeBinOnce.Do(func() {
		cmd := exec.Command(filepath.Join(RepoRoot(), "hack", "kube-binaries.sh"))
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			kubeBinErr = fmt.Errorf("hack/kube-binaries.sh: %w", err)
			return
		}
		kubeBinDir = strings.TrimSpace(string(out))
	})
	return kubeBinDir, kubeBinErr
}

// KubeAPIServer is a real kube-apiserver on a free loopback port with its own etcd, PKI for
// clients, aggregation (front-proxy) and service accounts, and RBAC authorization.
type KubeAPIServer struct {
	Dir string
	// URL is https://127.0.0.1:<port>. For a server in a network namespace it is the host end
	// of a bridge to it (for the test's own calls); InnerURL is its address inside.
	URL string
	// InnerURL is the server's own address, inside its network namespace if it has one.
	InnerURL string
	// Netns is the network namespace the server, its etcd and its kubelets run in (nil: the
	// host's).
	Netns *Netns
	// AdminConfig authenticates as a member of system:masters.
	AdminConfig *rest.Config
	// AdminKubeconfig is AdminConfig written to a file, for kubectl.
	AdminKubeconfig string
	Client          kubernetes.Interface

	// ClientCA signs user client certificates; FrontProxyCA signs the aggregator's proxy
	// client certificate that aggregated servers trust for X-Remote-* headers.
	ClientCA     *pki.CA
	FrontProxyCA *pki.CA

	bin    string
	args   []string
	cmd    *exec.Cmd
	exited chan struct{}
	etcd   *embeddedetcd.Server
	// etcdProcess is the etcd of a server in a network namespace, a process inside.
	etcdProcess *EtcdProcess
	logPath     string
}

// KubeOptions are the options of StartKubeAPIServerWith.
type KubeOptions struct {
	// Netns runs kube-apiserver and its etcd (the etcd binary) inside this network namespace;
	// URL is then a bridge from the host. Nil: on the host, with an embedded etcd.
	Netns *Netns
}

// StartKubeAPIServer starts etcd and kube-apiserver with everything in dir and waits until
// /readyz passes. Stop it with Stop.
func StartKubeAPIServer(ctx context.Context, dir string) (_ *KubeAPIServer, err error) {
	return StartKubeAPIServerWith(ctx, dir, KubeOptions{})
}

// StartKubeAPIServerWith is StartKubeAPIServer with options.
func StartKubeAPIServerWith(ctx context.Context, dir string, opts KubeOptions) (_ *KubeAPIServer, err error) {
	bin, err := KubeBinDir()
	if err != nil {
		return nil, err
	}
	k := &KubeAPIServer{Dir: dir, Netns: opts.Netns, logPath: filepath.Join(dir, "kube-apiserver.log")}
	defer func() {
		if err != nil {
			k.Stop()
		}
	}()
	etcdURL := ""
	if k.Netns != nil {
		if k.etcdProcess, err = newEtcdProcess(filepath.Join(dir, "etcd"), k.Netns); err != nil {
			return nil, err
		}
		if err := k.etcdProcess.Start(ctx); err != nil {
			return nil, err
		}
		etcdURL = k.etcdProcess.ClientURL
	} else {
		if k.etcd, err = embeddedetcd.Start(klog.NewContext(ctx, klog.Background().V(2)), embeddedetcd.Options{Directory: filepath.Join(dir, "etcd"), LogLevel: "error"}); err != nil {
			return nil, err
		}
		etcdURL = k.etcd.ClientURL
	}

	if k.ClientCA, err = pki.NewCA("kube-ca"); err != nil {
		return nil, err
	}
	if k.FrontProxyCA, err = pki.NewCA("front-proxy-ca"); err != nil {
		return nil, err
	}
	files := map[string][]byte{"client-ca.crt": k.ClientCA.CertPEM, "front-proxy-ca.crt": k.FrontProxyCA.CertPEM}
	issue := func(name string, ca *pki.CA, tmpl *x509.Certificate) error {
		certPEM, keyPEM, err := ca.IssuePEM(tmpl)
		files[name+".crt"], files[name+".key"] = certPEM, keyPEM
		return err
	}
	if err := issue("serving", k.ClientCA, &x509.Certificate{
		Subject: pkix.Name{CommonName: "kube-apiserver"}, DNSNames: []string{"localhost", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return nil, err
	}
	if err := issue("front-proxy-client", k.FrontProxyCA, &x509.Certificate{
		Subject: pkix.Name{CommonName: "front-proxy-client"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	// kube-apiserver's client certificate towards kubelets (see StartKubelet), which are
	// trusted through --kubelet-certificate-authority, the client CA.
	if err := issue("kubelet-client", k.ClientCA, &x509.Certificate{
		Subject:     pkix.Name{CommonName: KubeletClientCommonName, Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if files["sa.key"], err = keyutil.MarshalPrivateKeyToPEM(saKey); err != nil {
		return nil, err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}

	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--tls-cert-file=" + f("serving.crt"),
		"--tls-private-key-file=" + f("serving.key"),
		"--client-ca-file=" + f("client-ca.crt"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + f("sa.key"),
		"--service-account-signing-key-file=" + f("sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--requestheader-client-ca-file=" + f("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-uid-headers=X-Remote-Uid",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + f("front-proxy-client.crt"),
		"--proxy-client-key-file=" + f("front-proxy-client.key"),
		"--enable-aggregator-routing=false",
		"--kubelet-certificate-authority=" + f("client-ca.crt"),
		"--kubelet-client-certificate=" + f("kubelet-client.crt"),
		"--kubelet-client-key=" + f("kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--cert-dir=" + f("certs"),
		// Stop (and Restart) end watches at once instead of waiting for them, as
		// mount-apiserver does; without it a SIGTERM with watches open ran into the SIGKILL.
		"--shutdown-watch-termination-grace-period=2s",
		"--v=1",
	}
	k.bin, k.args = filepath.Join(bin, "kube-apiserver"), args
	if err := k.startProcess(); err != nil {
		return nil, err
	}

	k.InnerURL = "https://127.0.0.1:" + strconv.Itoa(port)
	k.URL = k.InnerURL
	if k.Netns != nil {
		// The serving certificate names 127.0.0.1, so the host end verifies as the inner one.
		addr, err := k.Netns.ForwardOut("127.0.0.1:" + strconv.Itoa(port))
		if err != nil {
			return nil, err
		}
		k.URL = "https://" + addr
	}
	if k.AdminConfig, err = k.UserConfig("kube-admin", "system:masters"); err != nil {
		return nil, err
	}
	if k.AdminKubeconfig, err = k.WriteKubeconfig(k.AdminConfig, "admin"); err != nil {
		return nil, err
	}
	if k.Client, err = kubernetes.NewForConfig(k.AdminConfig); err != nil {
		return nil, err
	}
	if err := k.waitReady(ctx); err != nil {
		return nil, err
	}
	return k, nil
}

// startProcess starts kube-apiserver with its arguments, its output appended to its log.
func (k *KubeAPIServer) startProcess() error {
	logFile, err := os.OpenFile(k.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	// Dies with the test process, even when it is killed.
	k.cmd = k.Netns.Command(k.bin, k.args...)
	k.cmd.Stdout, k.cmd.Stderr = logFile, logFile
	if err := k.cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting kube-apiserver: %w", err)
	}
	exited := make(chan struct{})
	k.exited = exited
	cmd := k.cmd
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	return nil
}

// Restart stops kube-apiserver (SIGTERM, as a rolling update does) and starts it again on the
// same port, certificates and etcd, and waits until it is ready. It returns how long the
// server took to stop and then to be ready again.
func (k *KubeAPIServer) Restart(ctx context.Context) (stopped, ready time.Duration, err error) {
	return k.RestartAfter(ctx, 0)
}

// RestartAfter is Restart with the server kept down for pause before it starts again, an
// outage longer than its clients' leases or timeouts. ready includes the pause.
func (k *KubeAPIServer) RestartAfter(ctx context.Context, pause time.Duration) (stopped, ready time.Duration, err error) {
	start := time.Now()
	k.stopProcess()
	stopped = time.Since(start)
	select {
	case <-time.After(pause):
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	if err := k.startProcess(); err != nil {
		return 0, 0, err
	}
	if err := k.waitReady(ctx); err != nil {
		return 0, 0, err
	}
	return stopped, time.Since(start) - stopped, nil
}

// Down stops kube-apiserver (SIGTERM) and leaves it down, its etcd running, until Up: a
// target that goes down in the middle of a test.
func (k *KubeAPIServer) Down() { k.stopProcess() }

// Up starts a kube-apiserver stopped with Down again, on the same port, certificates and
// etcd, and waits until it is ready.
func (k *KubeAPIServer) Up(ctx context.Context) error {
	if err := k.startProcess(); err != nil {
		return err
	}
	return k.waitReady(ctx)
}

// Pid is kube-apiserver's process id, 0 if it is not running (a bench's account of CPU).
func (k *KubeAPIServer) Pid() int {
	if k.cmd == nil || k.cmd.Process == nil {
		return 0
	}
	return k.cmd.Process.Pid
}

func (k *KubeAPIServer) waitReady(ctx context.Context) error {
	client, err := rest.HTTPClientFor(k.AdminConfig)
	if err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-k.exited:
			return false, fmt.Errorf("kube-apiserver exited; log: %s", k.Log())
		default:
		}
		resp, err := client.Get(k.URL + "/readyz")
		if err != nil {
			return false, nil //nolint:nilerr // not listening yet
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for kube-apiserver: %w", err)
	}
	return nil
}

// UserConfig returns a client configuration that authenticates with a client certificate of
// the cluster's CA, as user name in groups.
func (k *KubeAPIServer) UserConfig(name string, groups ...string) (*rest.Config, error) {
	certPEM, keyPEM, err := k.ClientCA.IssuePEM(&x509.Certificate{
		Subject:     pkix.Name{CommonName: name, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, err
	}
	return &rest.Config{
		Host:            k.URL,
		TLSClientConfig: rest.TLSClientConfig{CAData: k.ClientCA.CertPEM, CertData: certPEM, KeyData: keyPEM},
		QPS:             1000,
		Burst:           2000,
	}, nil
}

// WriteKubeconfig writes cfg (certificate or token credentials) as a kubeconfig in the
// server's directory and returns its path.
func (k *KubeAPIServer) WriteKubeconfig(cfg *rest.Config, name string) (string, error) {
	data, err := KubeconfigBytes(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(k.Dir, name+".kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return path, nil
}

// Log returns the kube-apiserver's log so far.
func (k *KubeAPIServer) Log() string {
	data, _ := os.ReadFile(k.logPath)
	return string(data)
}

// Stop stops kube-apiserver and its etcd.
func (k *KubeAPIServer) Stop() {
	k.stopProcess()
	if k.etcd != nil {
		k.etcd.Close()
	}
	if k.etcdProcess != nil {
		k.etcdProcess.Kill()
	}
}

// stopProcess stops kube-apiserver, SIGKILL after 15 s.
func (k *KubeAPIServer) stopProcess() {
	if k.cmd != nil && k.cmd.Process != nil {
		_ = k.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-k.exited:
		case <-time.After(15 * time.Second):
			_ = k.cmd.Process.Kill()
			<-k.exited
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
