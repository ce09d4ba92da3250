package options

import (
	"net/http"
	"net/http/httptest"
	"testing"

	restful "github.com/emicklei/go-restful/v3"

	mountapiserver "github.com/kcp-dev/mount-apiserver/pkg/apiserver"
)

// TestProxyRoutesChooseAsGoRestful builds the real server (standalone: Mounts and Secrets) and
// asks both go-restful's CurlyRouter and the server's ProxyRoutes for the route of many
// requests, of the proxy and of everything else: they must choose the same web service, route
// and error, for every method, Content-Type and Accept.
func TestProxyRoutesChooseAsGoRestful(t *testing.T) {
	container, routes := builtRoutes(t)
	const root = "/apis/mounts.kcp.io/v1alpha1"
	paths := []string{
		root + "/mounts/m/proxy/api/v1/namespaces",
		root + "/mounts/m/proxy/api",
		root + "/mounts/m/proxy/api/",
		root + "/mounts/m/proxy/api//v1",
		root + "/mounts/m/proxy//api",
		root + "/mounts/m/proxy/",
		root + "/mounts/m/proxy//",
		root + "/mounts/m/proxy///",
		root + "/mounts/m/proxy",
		root + "/mounts/m/proxyx/api",
		root + "/mounts/m/status",
		root + "/mounts/m/attach",
		root + "/mounts/m",
		root + "/mounts/m/",
		root + "/mounts",
		root + "/mounts//proxy/api",
		root + "/mounts/proxy/proxy/proxy",
		root + "/mounts/m:x/proxy/api",
		root + "/mounts/*/proxy/api/v1/pods",
		root + "/mounts/%2A/proxy/api",
		root + "/mounts/*/proxy/labels/env=prod/apis",
		root + "/mounts/*/proxy",
		root + "/watch/mounts/m",
		root,
		"/apis/mounts.kcp.io",
		"/apis",
		"/api/v1/namespaces/clusters/secrets/s",
		"/apis/mounts.kcp.io/v1alpha2/mounts/m/proxy/api",
		"//apis/mounts.kcp.io/v1alpha1/mounts/m/proxy/api",
		"/nowhere",
	}
	methods := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions, "CONNECT", "TRACE", "BREW"}
	headers := []map[string]string{
		{},
		{"Content-Type": "application/json", "Accept": "application/json"},
		{"Content-Type": "application/apply-patch+yaml", "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
		{"Content-Type": "text/plain", "Accept": "application/vnd.kubernetes.protobuf, */*"},
		{"Content-Type": "application/cbor", "Accept": "image/png"},
	}
	var fast int
	for _, path := range paths {
		for _, method := range methods {
			for _, h := range headers {
				r := httptest.NewRequest(method, "https://127.0.0.1"+path, nil)
				r.URL.Path = path
				for k, v := range h {
					r.Header.Set(k, v)
				}
				wantWS, wantRoute, wantErr := restful.CurlyRouter{}.SelectRoute(container.RegisteredWebServices(), r)
				gotWS, gotRoute, gotErr := routes.SelectRoute(container.RegisteredWebServices(), r)
				if gotWS != wantWS || describe(gotRoute) != describe(wantRoute) || errString(gotErr) != errString(wantErr) {
					t.Errorf("%s %s %v: ProxyRoutes chose %s (%v), go-restful %s (%v)", method, path, h, describe(gotRoute), gotErr, describe(wantRoute), wantErr)
				}
				if gotRoute != nil && gotRoute.Path == root+"/mounts/{name}/proxy/{path:*}" {
					fast++
				}
			}
		}
	}
	if fast == 0 {
		t.Error("no request took a proxy route")
	}
}

func describe(r *restful.Route) string {
	if r == nil {
		return "no route"
	}
	return r.Method + " " + r.Path + " " + r.Operation
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// builtRoutes builds the real server (not run) and returns its go-restful container and the
// ProxyRoutes of it.
func builtRoutes(tb testing.TB) (*restful.Container, *mountapiserver.ProxyRoutes) {
	tb.Helper()
	cfg, o := config(tb, nil)
	tb.Cleanup(func() { o.SecureServing.Listener.Close() })
	// The server is built, not run: its configuration's embedded etcd is released here.
	tb.Cleanup(cfg.Close)
	server, err := cfg.Complete().New()
	if err != nil {
		tb.Fatal(err)
	}
	container := server.GenericAPIServer.Handler.GoRestfulContainer
	routes, err := mountapiserver.NewProxyRoutes(container)
	if err != nil {
		tb.Fatal(err)
	}
	return container, routes
}

// BenchmarkSelectRoute: go-restful's CurlyRouter and ProxyRoutes choosing the route of a
// proxied GET on the real server's routes.
func BenchmarkSelectRoute(b *testing.B) {
	container, routes := builtRoutes(b)
	r := httptest.NewRequest(http.MethodGet, "https://127.0.0.1/apis/mounts.kcp.io/v1alpha1/mounts/bench/proxy/api/v1/namespaces/default", nil)
	for _, selector := range []struct {
		name string
		restful.RouteSelector
	}{{"CurlyRouter", restful.CurlyRouter{}}, {"ProxyRoutes", routes}} {
		b.Run(selector.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, route, err := selector.SelectRoute(container.RegisteredWebServices(), r); err != nil || route == nil {
					b.Fatal(route, err)
				}
			}
		})
	}
}
