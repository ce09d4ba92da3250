package apiserver

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	restful "github.com/emicklei/go-restful/v3"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
)

// ProxyRoutes selects the go-restful route of a request. go-restful's CurlyRouter matches
// the path against every route of the group and copies each candidate route (a large struct)
// twice: about 5 KB and 2 % of the CPU of every proxied request, most of what this server
// serves (issue #17). A path of the shape .../mounts/<name>/proxy/<path> can only be
// mounts/{name}/proxy/{path:*}, so ProxyRoutes answers it by method; every other request goes
// to the CurlyRouter, as before.
type ProxyRoutes struct {
	curly restful.CurlyRouter
	ws    *restful.WebService
	// prefix is the path of the Mounts, with a trailing slash.
	prefix string
	// byMethod are the routes of mounts/{name}/proxy/{path:*}.
	byMethod map[string]*restful.Route
}

var _ restful.RouteSelector = &ProxyRoutes{}

// NewProxyRoutes finds the proxy routes among the container's web services. The routes must
// take any content type and produce any, as go-restful's choice by method alone then equals
// its choice by method, Content-Type and Accept.
func NewProxyRoutes(container *restful.Container) (*ProxyRoutes, error) {
	root := "/apis/" + v1alpha1.SchemeGroupVersion.Group + "/" + v1alpha1.SchemeGroupVersion.Version
	p := &ProxyRoutes{prefix: root + "/mounts/", byMethod: map[string]*restful.Route{}}
	for _, ws := range container.RegisteredWebServices() {
		if ws.RootPath() != root {
			continue
		}
		p.ws = ws
		for _, route := range ws.Routes() {
			if route.Path != root+"/mounts/{name}/proxy/{path:*}" {
				continue
			}
			if len(route.If) > 0 || !slices.Equal(route.Consumes, []string{"*/*"}) || !slices.Equal(route.Produces, []string{"*/*"}) {
				return nil, fmt.Errorf("route %s %s: conditions %d, consumes %v, produces %v; want none, */* and */*", route.Method, route.Path, len(route.If), route.Consumes, route.Produces)
			}
			if _, dup := p.byMethod[route.Method]; dup {
				return nil, fmt.Errorf("route %s %s is registered twice", route.Method, route.Path)
			}
			p.byMethod[route.Method] = &route
		}
	}
	if len(p.byMethod) == 0 {
		return nil, fmt.Errorf("no route %s/mounts/{name}/proxy/{path:*} among the registered web services", root)
	}
	return p, nil
}

// SelectRoute implements restful.RouteSelector.
func (p *ProxyRoutes) SelectRoute(webServices []*restful.WebService, r *http.Request) (*restful.WebService, *restful.Route, error) {
	if route := p.match(r); route != nil {
		return p.ws, route, nil
	}
	return p.curly.SelectRoute(webServices, r)
}

// match returns the proxy route of r, or nil where it is not sure that the CurlyRouter would
// choose that route: an empty name, nothing after proxy/ but slashes (CurlyRouter trims them,
// which leaves mounts/{name}/proxy), a method the subresource does not take.
func (p *ProxyRoutes) match(r *http.Request) *restful.Route {
	rest, ok := strings.CutPrefix(r.URL.Path, p.prefix)
	if !ok {
		return nil
	}
	name, rest, ok := strings.Cut(rest, "/")
	if !ok || name == "" {
		return nil
	}
	inner, ok := strings.CutPrefix(rest, "proxy/")
	if !ok || strings.TrimRight(inner, "/") == "" {
		return nil
	}
	return p.byMethod[r.Method]
}
