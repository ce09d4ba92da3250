package mounts

import (
	"context"
	"net/http"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// AttachHandlerFunc builds the handler of one agent's attach request to a Mount.
type AttachHandlerFunc func(ctx context.Context, m *mounts.Mount) (http.Handler, error)

// AttachREST is the mounts/<name>/attach subresource: an agent next to a mount's target opens
// the mount's reverse tunnel here (a WebSocket, see pkg/tunnel).
//
// It is named attach, not tunnel, because kube-apiserver's long-running check
// (BasicLongRunningRequestCheck with the subresources attach, exec, proxy, log and
// portforward) applies to aggregated groups as well: through the host's aggregator a
// "tunnel" subresource would be cut by the 60 s request timeout and hold a
// priority-and-fairness seat for the whole life of the tunnel. This server's own
// LongRunningFunc lists attach as well (pkg/apiserver).
type AttachREST struct {
	mounts  mountReader
	handler AttachHandlerFunc
}

var (
	_ rest.Connecter = &AttachREST{}
	_ rest.Storage   = &AttachREST{}
)

// attachMethods: a WebSocket upgrade is a GET; kube-aggregator passes it on as one.
var attachMethods = []string{http.MethodGet}

// New returns the object the subresource is about.
func (r *AttachREST) New() runtime.Object { return &mounts.Mount{} }

// Destroy does nothing: the main resource's store owns the storage.
func (r *AttachREST) Destroy() {}

// ConnectMethods returns the methods of an attach.
func (r *AttachREST) ConnectMethods() []string { return attachMethods }

// NewConnectOptions says the subresource takes no options and no path.
func (r *AttachREST) NewConnectOptions() (runtime.Object, bool, string) { return nil, false, "" }

// Connect reads the Mount as the proxy does (fence.go): an agent must not attach to a Mount
// deleted (or deleted and created again, with another UID) a moment ago, on any replica.
func (r *AttachREST) Connect(ctx context.Context, name string, _ runtime.Object, _ rest.Responder) (http.Handler, error) {
	m, err := r.mounts.get(ctx, name)
	if err != nil {
		return nil, err
	}
	return r.handler(ctx, m)
}
