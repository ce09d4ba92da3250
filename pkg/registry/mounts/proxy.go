package mounts

import (
	"context"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/clusters"
)

// ProxyHandlerFunc builds the handler of one proxied request to a Mount. m may be shared with
// the watch cache: read it, never change it.
type ProxyHandlerFunc func(ctx context.Context, m *mounts.Mount, innerPath string) (http.Handler, error)

// FanOutName is the mount name of the fan-out, mounts/*/proxy (pkg/fanout).
const FanOutName = "*"

// FanOutHandlerFunc builds the handler of one request to mounts/*/proxy: list lists the Mounts
// of the request's cluster that a selector selects, each read as a single proxied request
// reads its Mount.
type FanOutHandlerFunc func(ctx context.Context, list func(context.Context, labels.Selector) ([]*mounts.Mount, error), innerPath string) (http.Handler, error)

// ProxyREST is the mounts/<name>/proxy[/<path>] subresource: it forwards any request to the
// Mount's target, and mounts/*/proxy to many (FanOutHandlerFunc).
type ProxyREST struct {
	mounts  mountReader
	handler ProxyHandlerFunc
	fanOut  FanOutHandlerFunc
}

var (
	_ rest.Connecter = &ProxyREST{}
	_ rest.Storage   = &ProxyREST{}
)

// proxyMethods are all methods a Kubernetes API request uses. OPTIONS is authorized as "get"
// (see the request info resolver of pkg/apiserver).
var proxyMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// New returns the options object of the subresource.
func (r *ProxyREST) New() runtime.Object { return &mounts.MountProxyOptions{} }

// Destroy does nothing: the main resource's store owns the storage.
func (r *ProxyREST) Destroy() {}

// ConnectMethods returns the proxied methods.
func (r *ProxyREST) ConnectMethods() []string { return proxyMethods }

// NewConnectOptions says the subresource takes a trailing path into the "path" option.
func (r *ProxyREST) NewConnectOptions() (runtime.Object, bool, string) {
	return &mounts.MountProxyOptions{}, true, "path"
}

// Connect reads the Mount so that a request that starts after a write of its Mount was
// acknowledged sees that write, on any replica (fence.go). The watch cache as it is
// (resourceVersion "0") lagged behind writes: a deleted Mount was still proxied, a Mount
// switched from MountCredentials to Impersonate still lent its bare credentials. With an etcd
// that replicas share, the read is a quorum read: it costs about as much as asking etcd for
// its current revision, which a consistent read from the cache would need as well, and it
// never waits for the watch to catch up (BenchmarkProxyMountRead). With the embedded etcd it is
// a cache read no older than this process's newest acknowledged write.
func (r *ProxyREST) Connect(ctx context.Context, name string, opts runtime.Object, _ rest.Responder) (http.Handler, error) {
	proxyOpts, ok := opts.(*mounts.MountProxyOptions)
	if !ok {
		return nil, fmt.Errorf("invalid options object: %#v", opts)
	}
	if name == FanOutName {
		if r.fanOut == nil {
			return nil, apierrors.NewNotFound(mounts.Resource("mounts"), name)
		}
		if clusters.From(ctx) == clusters.Wildcard {
			return nil, apierrors.NewBadRequest("mounts/*/proxy reaches the mounts of one logical cluster: name it (/clusters/<name>/...)")
		}
		return r.fanOut(ctx, r.mounts.list, proxyOpts.Path)
	}
	m, err := r.mounts.get(ctx, name)
	if err != nil {
		return nil, err
	}
	return r.handler(ctx, m, proxyOpts.Path)
}
