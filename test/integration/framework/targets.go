package framework

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kcp-dev/mount-apiserver/pkg/pki"
)

// KubeconfigBytes encodes cfg's server, CA and inline credentials as a kubeconfig, the form a
// Mount's Secret holds.
func KubeconfigBytes(cfg *rest.Config) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["target"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["target"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["target"] = &clientcmdapi.Context{Cluster: "target", AuthInfo: "target"}
	kc.CurrentContext = "target"
	return clientcmd.Write(*kc)
}

// RecordingServer is an HTTPS server on 127.0.0.1 that records the requests it receives and
// answers a small Status; it stands in for a target where a test must see exactly what
// crossed the proxy.
type RecordingServer struct {
	*httptest.Server
	CA *pki.CA
	// Handler, if set, answers instead of the default Status.
	Handler http.HandlerFunc

	mu       sync.Mutex
	requests []*http.Request
}

// StartRecordingServer starts a recording server on addr ("127.0.0.1:0" for any port) with
// a serving certificate of ca; nil makes a new CA. Passing the CA of an earlier server lets a
// test restart "the same" target on the same port.
func StartRecordingServer(addr string, ca *pki.CA) (*RecordingServer, error) {
	if ca == nil {
		var err error
		if ca, err = pki.NewCA("recording-ca"); err != nil {
			return nil, err
		}
	}
	cert, key, err := ca.Issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "recording-target"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	r := &RecordingServer{CA: ca}
	r.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.requests = append(r.requests, req.Clone(req.Context()))
		h := r.Handler
		r.mu.Unlock()
		if h != nil {
			h(w, req)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Success","message":"recorded"}`))
	}))
	r.Server.Listener.Close()
	r.Server.Listener = l
	r.Server.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{cert.Raw}, PrivateKey: key}}}
	r.Server.StartTLS()
	return r, nil
}

// LastCall returns the last request received that is not one of the status controller's
// probes (GET /readyz, GET /version), or nil: a probe may arrive between a test's request and
// its look at what arrived.
func (r *RecordingServer) LastCall() *http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.requests) - 1; i >= 0; i-- {
		req := r.requests[i]
		if req.Method == http.MethodGet && (req.URL.Path == "/readyz" || req.URL.Path == "/version") {
			continue
		}
		return req
	}
	return nil
}

// Requests returns the requests received so far.
func (r *RecordingServer) Requests() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.requests...)
}

// Kubeconfig returns a kubeconfig for this server with a bearer token.
func (r *RecordingServer) Kubeconfig(token string) ([]byte, error) {
	return KubeconfigBytes(&rest.Config{Host: r.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: r.CA.CertPEM}})
}
