package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
	"k8s.io/utils/ptr"
)

// KubeletClientCommonName is the common name of the client certificate kube-apiserver
// presents to kubelets; the test kubelet accepts no other client.
const KubeletClientCommonName = "kube-apiserver-kubelet-client"

const (
	kubeletStreamIdleTimeout = 5 * time.Minute
	kubeletHeartbeatPeriod   = 10 * time.Second
	kubeletLogPeriod         = 200 * time.Millisecond
	fakeContainerImage       = "registry.k8s.io/pause:fake"
)

// Kubelet is a minimal kubelet for tests: it registers a Node, marks pods created with
// CreatePod as running on it, and serves the kubelet API that kube-apiserver proxies to
// (exec, attach, portForward, containerLogs) over HTTPS with the CRI streaming server
// library. Commands run on this machine, port-forwards dial 127.0.0.1 and attach echoes
// stdin to stdout.
type Kubelet struct {
	NodeName string
	// Port is the kubelet's HTTPS port on 127.0.0.1.
	Port int

	k      *KubeAPIServer
	srv    *http.Server
	ln     *trackingListener
	ctx    context.Context
	cancel context.CancelFunc
	// handlers counts running HTTP handlers and background goroutines.
	handlers sync.WaitGroup
	stopOnce sync.Once

	// logStreams counts containerLogs responses being written.
	logStreams atomic.Int32

	mu       sync.Mutex
	pods     map[string]bool // namespace/name
	requests []KubeletRequest
}

// KubeletRequest records a request kube-apiserver made to the kubelet.
type KubeletRequest struct {
	Method, Path, RawQuery, Proto string
	// Upgrade, Connection, StreamProtocol (X-Stream-Protocol-Version) and WebSocketProtocol
	// (Sec-WebSocket-Protocol) are the request headers that select the streaming protocol.
	Upgrade, Connection, StreamProtocol, WebSocketProtocol string
	ClientCommonName                                       string
}

// StartKubelet starts a kubelet for node nodeName against k: it serves the kubelet API on a
// free 127.0.0.1 port (in k's network namespace) with a serving certificate of k.ClientCA (which kube-apiserver trusts
// with --kubelet-certificate-authority), requires kube-apiserver's kubelet client
// certificate, and registers a Ready Node pointing at that port. Stop it with Stop.
func StartKubelet(ctx context.Context, k *KubeAPIServer, nodeName string) (_ *Kubelet, err error) {
	cert, key, err := k.ClientCA.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "system:node:" + nodeName, Organization: []string{"system:nodes"}},
		DNSNames:    []string{"localhost", nodeName},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("issuing kubelet serving certificate: %w", err)
	}
	clientCAs := x509.NewCertPool()
	clientCAs.AddCert(k.ClientCA.Cert)

	// In k's network namespace, where kube-apiserver dials it.
	l, err := k.Netns.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	kl := &Kubelet{
		NodeName: nodeName,
		Port:     l.Addr().(*net.TCPAddr).Port,
		k:        k,
		ln:       &trackingListener{Listener: l, conns: map[net.Conn]struct{}{}},
		pods:     map[string]bool{},
	}
	kl.ctx, kl.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			kl.Stop()
		}
	}()

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	mux.HandleFunc("/exec/{namespace}/{pod}/{container}", kl.serveExec)
	mux.HandleFunc("/exec/{namespace}/{pod}/{uid}/{container}", kl.serveExec)
	mux.HandleFunc("/attach/{namespace}/{pod}/{container}", kl.serveAttach)
	mux.HandleFunc("/attach/{namespace}/{pod}/{uid}/{container}", kl.serveAttach)
	mux.HandleFunc("/portForward/{namespace}/{pod}", kl.servePortForward)
	mux.HandleFunc("/portForward/{namespace}/{pod}/{uid}", kl.servePortForward)
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", kl.serveContainerLogs)

	kl.srv = &http.Server{
		Handler: kl.authenticate(mux),
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    clientCAs,
		},
		ReadHeaderTimeout: 30 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return kl.ctx },
	}
	kl.handlers.Add(1)
	go func() {
		defer kl.handlers.Done()
		_ = kl.srv.ServeTLS(kl.ln, "", "")
	}()

	if err := kl.registerNode(ctx); err != nil {
		return nil, err
	}
	kl.handlers.Add(1)
	go func() {
		defer kl.handlers.Done()
		t := time.NewTicker(kubeletHeartbeatPeriod)
		defer t.Stop()
		for {
			select {
			case <-kl.ctx.Done():
				return
			case <-t.C:
				_ = kl.updateNodeStatus(kl.ctx)
			}
		}
	}()
	return kl, nil
}

// Stop stops serving, closes all connections including upgraded streams, ends running
// commands and waits for everything the kubelet started. The Node stays registered.
func (kl *Kubelet) Stop() {
	kl.stopOnce.Do(func() {
		kl.cancel()
		if kl.srv != nil {
			_ = kl.srv.Close()
		}
		_ = kl.ln.Close()
		// Hijacked (upgraded) connections are not closed by http.Server.Close. Give killed
		// execs a moment to report their status, then close them all.
		done := make(chan struct{})
		go func() {
			kl.handlers.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(time.Second):
		}
		kl.ln.closeAll()
		<-done
	})
}

// Requests returns the requests served so far.
func (kl *Kubelet) Requests() []KubeletRequest {
	kl.mu.Lock()
	defer kl.mu.Unlock()
	return append([]KubeletRequest(nil), kl.requests...)
}

// ActiveLogStreams returns how many containerLogs responses are being written, so tests can
// check that a follow ends when its client goes away.
func (kl *Kubelet) ActiveLogStreams() int { return int(kl.logStreams.Load()) }

// CreatePod creates pod namespace/name with one container "main" bound to the kubelet's node
// and reports it Running, so that exec, attach, logs and port-forward are accepted. The
// namespace and its default ServiceAccount are created when missing.
func (kl *Kubelet) CreatePod(ctx context.Context, namespace, name string) error {
	client := kl.k.Client
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", namespace, err)
	}
	// There is no service account controller; admission needs the default ServiceAccount.
	if _, err := client.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating default service account in %s: %w", namespace, err)
	}
	kl.mu.Lock()
	kl.pods[namespace+"/"+name] = true
	kl.mu.Unlock()

	pod, err := client.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			NodeName:                      kl.NodeName,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers:                    []corev1.Container{{Name: "main", Image: fakeContainerImage}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating pod %s/%s: %w", namespace, name, err)
	}
	now := metav1.Now()
	pod.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    "127.0.0.1",
		HostIPs:   []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP:     "127.0.0.1",
		PodIPs:    []corev1.PodIP{{IP: "127.0.0.1"}},
		StartTime: &now,
		QOSClass:  corev1.PodQOSBestEffort,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
		ContainerStatuses: []corev1.ContainerStatus{{
			Name:        "main",
			Image:       fakeContainerImage,
			ImageID:     fakeContainerImage,
			ContainerID: "fake://" + namespace + "_" + name + "_main",
			Ready:       true,
			Started:     ptr.To(true),
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		}},
	}
	if _, err := client.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating status of pod %s/%s: %w", namespace, name, err)
	}
	return nil
}

func (kl *Kubelet) registerNode(ctx context.Context) error {
	nodes := kl.k.Client.CoreV1().Nodes()
	_, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   kl.NodeName,
		Labels: map[string]string{"kubernetes.io/hostname": kl.NodeName, "kubernetes.io/os": "linux"},
	}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering node %s: %w", kl.NodeName, err)
	}
	if err := kl.updateNodeStatus(ctx); err != nil {
		return fmt.Errorf("updating status of node %s: %w", kl.NodeName, err)
	}
	return nil
}

func (kl *Kubelet) updateNodeStatus(ctx context.Context) error {
	nodes := kl.k.Client.CoreV1().Nodes()
	node, err := nodes.Get(ctx, kl.NodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	ready := corev1.NodeCondition{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "test kubelet is ready",
		LastHeartbeatTime: now, LastTransitionTime: now,
	}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready.LastTransitionTime = c.LastTransitionTime
		}
	}
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node.Status.Capacity, node.Status.Allocatable = resources, resources
	node.Status.Phase = corev1.NodeRunning
	node.Status.Conditions = []corev1.NodeCondition{ready}
	node.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
		{Type: corev1.NodeHostName, Address: kl.NodeName},
	}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(kl.Port) //nolint:gosec // a TCP port
	node.Status.NodeInfo.KubeletVersion = "v1.37.1"
	node.Status.NodeInfo.OperatingSystem = "linux"
	node.Status.NodeInfo.Architecture = "amd64"
	node.Status.NodeInfo.ContainerRuntimeVersion = "fake://0.0.0"
	_, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

// authenticate admits only kube-apiserver's kubelet client certificate (the TLS handshake
// already verified it against the client CA), records the request and counts the handler
// so that Stop can wait for it.
func (kl *Kubelet) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kl.handlers.Add(1)
		defer kl.handlers.Done()
		cn := ""
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			cn = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		kl.mu.Lock()
		kl.requests = append(kl.requests, KubeletRequest{
			Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Proto: r.Proto,
			Upgrade: r.Header.Get("Upgrade"), Connection: r.Header.Get("Connection"),
			StreamProtocol:    strings.Join(r.Header.Values("X-Stream-Protocol-Version"), ", "),
			WebSocketProtocol: strings.Join(r.Header.Values("Sec-WebSocket-Protocol"), ", "),
			ClientCommonName:  cn,
		})
		kl.mu.Unlock()
		if cn != KubeletClientCommonName {
			http.Error(w, fmt.Sprintf("client %q is not allowed", cn), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// knownPod writes 404 and returns false unless the request names a pod created with
// CreatePod and its container "main".
func (kl *Kubelet) knownPod(w http.ResponseWriter, r *http.Request) bool {
	kl.mu.Lock()
	ok := kl.pods[r.PathValue("namespace")+"/"+r.PathValue("pod")]
	kl.mu.Unlock()
	if !ok {
		http.Error(w, "pod does not exist", http.StatusNotFound)
		return false
	}
	if c := r.PathValue("container"); c != "" && c != "main" {
		http.Error(w, fmt.Sprintf("container %q does not exist", c), http.StatusNotFound)
		return false
	}
	return true
}

func (kl *Kubelet) serveExec(w http.ResponseWriter, r *http.Request) {
	if !kl.knownPod(w, r) {
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	remotecommand.ServeExec(w, r, kl, r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container"), r.URL.Query()["command"],
		opts, kubeletStreamIdleTimeout, remotecommand.DefaultStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (kl *Kubelet) serveAttach(w http.ResponseWriter, r *http.Request) {
	if !kl.knownPod(w, r) {
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	remotecommand.ServeAttach(w, r, kl, r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container"),
		opts, kubeletStreamIdleTimeout, remotecommand.DefaultStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

func (kl *Kubelet) servePortForward(w http.ResponseWriter, r *http.Request) {
	if !kl.knownPod(w, r) {
		return
	}
	// Ports are only given for WebSocket requests; SPDY names them per stream.
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	portforward.ServePortForward(w, r, kl, r.PathValue("pod"), r.PathValue("uid"), opts,
		kubeletStreamIdleTimeout, remotecommand.DefaultStreamCreationTimeout, portforward.SupportedProtocols)
}

// serveContainerLogs writes "log line N" lines: three without follow=true, else one every
// 200ms until the client goes away.
func (kl *Kubelet) serveContainerLogs(w http.ResponseWriter, r *http.Request) {
	if !kl.knownPod(w, r) {
		return
	}
	kl.logStreams.Add(1)
	defer kl.logStreams.Add(-1)
	follow, _ := strconv.ParseBool(r.URL.Query().Get("follow"))
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	t := time.NewTicker(kubeletLogPeriod)
	defer t.Stop()
	for i := 1; ; i++ {
		if _, err := fmt.Fprintf(w, "log line %d\n", i); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		if !follow && i >= 3 {
			return
		}
		if follow {
			select {
			case <-r.Context().Done():
				return
			case <-t.C:
			}
		}
	}
}

// ExecInContainer implements remotecommand.Executor by running cmd on this machine.
func (kl *Kubelet) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, _ <-chan remotecommand.TerminalSize, timeout time.Duration) error {
	if len(cmd) == 0 {
		return errors.New("no command given")
	}
	ctx, cancel := kl.streamContext(ctx)
	defer cancel()
	if timeout > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeout(ctx, timeout)
		defer cancelTimeout()
	}
	c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	if in != nil {
		// Copied outside of Wait: a client may keep stdin open after the command ended,
		// and Wait must not wait for it (nor cut stdout short to stop waiting).
		stdin, err := c.StdinPipe()
		if err != nil {
			return fmt.Errorf("stdin: %w", err)
		}
		go func() {
			_, _ = io.Copy(stdin, in)
			_ = stdin.Close()
		}()
	}
	if out != nil {
		c.Stdout = out
	}
	switch {
	case tty: // no pseudo-terminal: stderr goes to the single tty stream
		c.Stderr = out
	case errOut != nil:
		c.Stderr = errOut
	}
	// Orphans of the command that keep its stdout open do not hold the stream forever.
	c.WaitDelay = 10 * time.Second
	err := c.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, exec.ErrWaitDelay) && c.ProcessState != nil && c.ProcessState.Success():
		return nil
	case errors.As(err, &exitErr) && exitErr.ExitCode() >= 0:
		return utilexec.CodeExitError{Err: err, Code: exitErr.ExitCode()}
	default:
		return err
	}
}

// AttachContainer implements remotecommand.Attacher: the "container" echoes stdin to stdout.
func (kl *Kubelet) AttachContainer(ctx context.Context, _, _, _ string, in io.Reader, out, _ io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize) error {
	if in == nil || out == nil {
		return nil
	}
	ctx, cancel := kl.streamContext(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(out, in)
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PortForward implements portforward.PortForwarder by connecting to 127.0.0.1:port (in the
// cluster's network namespace, if it has one).
func (kl *Kubelet) PortForward(ctx context.Context, _, _ string, port int32, stream io.ReadWriteCloser) error {
	ctx, cancel := kl.streamContext(ctx)
	defer cancel()
	conn, err := kl.k.Netns.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))))
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	defer stop()
	go func() {
		_, _ = io.Copy(conn, stream)
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	_, err = io.Copy(stream, conn)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// streamContext is ctx, also cancelled when the kubelet stops.
func (kl *Kubelet) streamContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(kl.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// trackingListener remembers accepted connections so that Stop can close upgraded ones.
type trackingListener struct {
	net.Listener
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, l: l}
	l.conns[tc] = struct{}{}
	return tc, nil
}

func (l *trackingListener) closeAll() {
	l.mu.Lock()
	l.closed = true
	conns := make([]net.Conn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
