package framework

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
)

// Mounted workspaces (Workspace.spec.mount), as each kcp version serves them (DESIGN.md
// section 1):
//
//   - all: only with feature gate WorkspaceMounts; without it the Workspace stays Scheduling
//     and its requests answer 404. kcp reconciles the Workspace on its events only: it reads
//     the Mount until it has a status.URL, copies that URL once, and is Ready only if the
//     Mount was Ready then (later changes of the Mount are not noticed; TouchWorkspace is an
//     event).
//   - v0.32.3, behind its front-proxy: the caller is authenticated, and a status.URL below
//     the front-proxy's /services/mounts mapping is called with the mapping's requestheader
//     certificate and X-Remote-* naming the caller, its credentials stripped; a status.URL
//     of kcp's own paths is served by kcp as the caller's own request (standalone kcp); any
//     other host answers 404 (kcp issue #3845).
//   - main of 2026-08 (dac74f5): WithLocalProxy forwards BEFORE authentication, with
//     InsecureSkipVerify and the --mount-proxy-client-cert-file certificate, headers
//     unchanged: the caller's Authorization, Impersonate-* and any X-Remote-* it sent, also to
//     plain http. kcp's front-proxy and shard accept X-Remote-* on requests with that
//     certificate (kcp #4238: it exists so the front-proxy keeps them).
//   - newer main (pkg/server/mountproxy.go): the caller is authenticated first and needs
//     "access" and "get" on the Workspace in its parent; impersonation is refused;
//     Authorization and Impersonate-* are dropped and X-Remote-User/-Group/-Extra-* (no UID)
//     name the caller, with the mount-proxy certificate; X-Kcp-Mount-Hops counts hops (508
//     from the 3rd); https only, verified.

// reconcileMounted is an event of mounted workspace ws.
func (k *Kcp) reconcileMounted(ws *KcpWorkspace) {
	k.mu.Lock()
	ws.generation++
	gen := ws.generation
	if !k.Options.WorkspaceMounts {
		ws.phase = "Scheduling"
		k.mu.Unlock()
		return
	}
	k.mu.Unlock()
	select {
	case <-k.stop:
		return
	default:
	}
	k.background.Add(1)
	go func() {
		defer k.background.Done()
		for {
			mountURL, phase, err := k.readMount(ws)
			k.mu.Lock()
			if ws.generation != gen {
				k.mu.Unlock()
				return
			}
			if err == nil && mountURL != "" {
				ws.mountURL = mountURL
				if phase == "Ready" {
					ws.phase = "Ready"
				} else {
					ws.phase = "Initializing"
				}
				k.mu.Unlock()
				return
			}
			k.mu.Unlock()
			select {
			case <-k.stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
}

// readMount reads the Mount of ws through the export's virtual storage, as kcp's
// workspacemounts controller does.
func (k *Kcp) readMount(ws *KcpWorkspace) (mountURL, phase string, err error) {
	k.mu.Lock()
	base, shard := k.mountURL, k.shard
	k.mu.Unlock()
	if shard == nil {
		return "", "", fmt.Errorf("no endpoint for the export's virtual storage")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, base.String()+"/clusters/"+ws.MountCluster+"/apis/mounts.kcp.io/v1alpha1/mounts/"+ws.MountName, nil)
	if err != nil {
		return "", "", err
	}
	resp, err := shard.Do(r)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	var mount struct {
		Status struct {
			Phase string `json:"phase"`
			URL   string `json:"URL"`
		} `json:"status"`
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("reading mount %s: %s", ws.MountName, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&mount); err != nil {
		return "", "", err
	}
	return mount.Status.URL, mount.Status.Phase, nil
}

// mountedTarget checks that ws serves requests and returns where inner goes, or answers.
func (k *Kcp) mountedTarget(w http.ResponseWriter, ws *KcpWorkspace, inner string) (*url.URL, bool) {
	k.mu.Lock()
	phase, mountURL := ws.phase, ws.mountURL
	k.mu.Unlock()
	if !k.Options.WorkspaceMounts || phase == "Scheduling" {
		kcpStatus(w, http.StatusNotFound, "NotFound", "the server could not find the requested resource")
		return nil, false
	}
	if phase != "Ready" {
		kcpStatus(w, http.StatusServiceUnavailable, "ServiceUnavailable", fmt.Sprintf("workspace %q is mounted and not ready", ws.Path))
		return nil, false
	}
	target, err := url.Parse(strings.TrimSuffix(mountURL, "/") + inner)
	if err != nil {
		kcpStatus(w, http.StatusBadGateway, "InternalError", err.Error())
		return nil, false
	}
	return target, true
}

// serveMounted serves an authenticated caller's request in mounted workspace ws
// (v0.32.3 and newer main).
func (k *Kcp) serveMounted(w http.ResponseWriter, req *http.Request, ws *KcpWorkspace, inner string, u KcpUser) {
	target, ok := k.mountedTarget(w, ws, inner)
	if !ok {
		return
	}
	own, _ := url.Parse(k.URL)
	if k.Version == KcpMain {
		k.serveMountProxy(w, req, ws, target, own, u)
		return
	}
	switch {
	case target.Host == own.Host && strings.HasPrefix(target.Path, KcpMountsMapping+"/"):
		// The front-proxy's mapping to mount-apiserver.
		r := req.Clone(req.Context())
		r.URL.Path, r.URL.RawPath = target.Path, ""
		k.serveMapping(w, r, u)
	case target.Host == own.Host:
		// Standalone kcp sends the request on unchanged; its own path authenticates it.
		r := req.Clone(req.Context())
		r.URL.Path, r.URL.RawPath = target.Path, ""
		k.ServeHTTP(w, r)
	default:
		kcpStatus(w, http.StatusNotFound, "NotFound", "the front-proxy maps no path to "+target.Host+" (kcp issue #3845)")
	}
}

// serveMountProxy is newer kcp main's mount proxy.
func (k *Kcp) serveMountProxy(w http.ResponseWriter, req *http.Request, ws *KcpWorkspace, target, own *url.URL, u KcpUser) {
	for key := range req.Header {
		if strings.HasPrefix(key, "Impersonate-") {
			kcpStatus(w, http.StatusForbidden, "Forbidden", "impersonation is not supported in mounted workspaces")
			return
		}
	}
	parentPath, name := ws.Path, ws.Path
	if i := strings.LastIndex(ws.Path, ":"); i > 0 {
		parentPath, name = ws.Path[:i], ws.Path[i+1:]
	}
	k.mu.Lock()
	parent := k.workspaces[parentPath]
	k.mu.Unlock()
	if !k.allowed(req.Context(), parent, u, authorizationv1.ResourceAttributes{Verb: "get", Group: "tenancy.kcp.io", Resource: "workspaces", Name: name}) {
		kcpStatus(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("User %q cannot get workspace %q in %q", u.Name, name, parentPath))
		return
	}
	hops, _ := strconv.Atoi(req.Header.Get(kcpMountHops))
	if hops >= kcpMaxMountHops {
		kcpStatus(w, http.StatusLoopDetected, "LoopDetected", "too many mount hops")
		return
	}
	if target.Scheme != "https" {
		kcpStatus(w, http.StatusBadGateway, "BadGateway", "mount URLs must be https")
		return
	}
	r := req.Clone(req.Context())
	r.URL.Path, r.URL.RawPath = target.Path, ""
	stripCaller(r.Header)
	r.Header.Set(kcpMountHops, strconv.Itoa(hops+1))
	if target.Host == own.Host {
		// The front-proxy or the shard trust X-Remote-* with the mount-proxy certificate.
		k.serveAsMountProxy(w, r, u)
		return
	}
	k.mu.Lock()
	roots := k.mountRoots
	k.mu.Unlock()
	if roots == nil {
		kcpStatus(w, http.StatusBadGateway, "BadGateway", "no CA verifies the mount's URL")
		return
	}
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{k.mountProxyCert}}, ForceAttemptHTTP2: true}
	defer transport.CloseIdleConnections()
	k.reverseProxy(w, r, target, target.Path, "", transport, KcpMountProxyClientName, func(h http.Header) {
		maps.Copy(h, remoteHeaders(u, false))
	})
}

// serveMountedUnauthenticated is kcp main 2026-08's WithLocalProxy: before authentication,
// headers unchanged, the mount-proxy certificate, no verification.
func (k *Kcp) serveMountedUnauthenticated(w http.ResponseWriter, req *http.Request, ws *KcpWorkspace, inner string) {
	target, ok := k.mountedTarget(w, ws, inner)
	if !ok {
		return
	}
	own, _ := url.Parse(k.URL)
	r := req.Clone(req.Context())
	r.URL.Path, r.URL.RawPath = target.Path, ""
	if target.Host == own.Host {
		if u, ok := remoteUser(r.Header); ok {
			k.serveAsMountProxy(w, r, u)
			return
		}
		if strings.HasPrefix(target.Path, KcpMountsMapping+"/") {
			u, ok := k.authenticate(r)
			if !ok {
				kcpStatus(w, http.StatusUnauthorized, "Unauthorized", "Unauthorized")
				return
			}
			k.serveMapping(w, r, u)
			return
		}
		k.ServeHTTP(w, r)
		return
	}
	transport := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{k.mountProxyCert}}, ForceAttemptHTTP2: true} //nolint:gosec // what kcp main 2026-08 does
	defer transport.CloseIdleConnections()
	k.reverseProxy(w, r, target, target.Path, "", transport, KcpMountProxyClientName, func(http.Header) {})
}

// serveAsMountProxy serves, on the harness's own listener, a request that carries the
// mount-proxy certificate and X-Remote-* naming u: the front-proxy's mapping sends it on
// for u, the shard serves it as u.
func (k *Kcp) serveAsMountProxy(w http.ResponseWriter, r *http.Request, u KcpUser) {
	if strings.HasPrefix(r.URL.Path, KcpMountsMapping+"/") {
		k.serveMapping(w, r, u)
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/clusters/")
	if !ok {
		kcpStatus(w, http.StatusNotFound, "NotFound", "the harness serves only /clusters/ and /services/ paths")
		return
	}
	wsName, inner, _ := strings.Cut(rest, "/")
	k.mu.Lock()
	ws := k.workspaces[wsName]
	k.mu.Unlock()
	k.serveWorkspaceAs(w, r, ws, wsName, "/"+inner, u)
}

// remoteUser reads the X-Remote-* headers of a request.
func remoteUser(h http.Header) (KcpUser, bool) {
	name := h.Get("X-Remote-User")
	if name == "" {
		return KcpUser{}, false
	}
	u := KcpUser{Name: name, UID: h.Get("X-Remote-Uid"), Groups: h.Values("X-Remote-Group")}
	for key, values := range h {
		if extra, ok := strings.CutPrefix(key, "X-Remote-Extra-"); ok {
			if u.Extra == nil {
				u.Extra = map[string][]string{}
			}
			unescaped, err := url.PathUnescape(strings.ToLower(extra))
			if err != nil {
				continue
			}
			u.Extra[unescaped] = values
		}
	}
	return u, true
}
