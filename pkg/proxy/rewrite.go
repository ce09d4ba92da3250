package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/kcp-dev/mount-apiserver/pkg/admissionrelay"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/rewrite"
)

// MaxRewrittenBodyBytes bounds a request body that a renaming mount reads to rewrite it: what
// kube-apiserver accepts (3 MiB); a larger body is refused with 413 before it reaches memory
// whole.
const MaxRewrittenBodyBytes = 3 * 1024 * 1024

// maxCompiledRules bounds the compiled rules kept, one entry per renaming mount generation.
const maxCompiledRules = 1024

// compiledRules keeps the compiled spec.rewrites of renaming mounts by UID and generation, so
// that a request compiles nothing. A mount without rewrites never reaches it.
type compiledRules struct {
	mu    sync.Mutex
	rules map[types.UID]generationRules
}

type generationRules struct {
	generation int64
	rules      *rewrite.Rules
}

// get returns m's compiled rules, nil for a mount whose rewrites rename nothing.
func (c *compiledRules) get(m *mounts.Mount) (*rewrite.Rules, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.rules[m.UID]; ok && e.generation == m.Generation && m.UID != "" {
		return e.rules, nil
	}
	rules, err := rewrite.Compile(m.Spec.Rewrites)
	if err != nil {
		return nil, err
	}
	if c.rules == nil || len(c.rules) >= maxCompiledRules {
		c.rules = map[types.UID]generationRules{}
	}
	c.rules[m.UID] = generationRules{m.Generation, rules}
	return rules, nil
}

func (c *compiledRules) forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.rules, uid)
}

// RewriteRules returns the compiled rules of a mount's spec.rewrites, nil when they rename
// nothing (the admission relay's view of the proxy's rules).
func (p *Proxier) RewriteRules(m *mounts.Mount) (*rewrite.Rules, error) {
	if m.Spec.Rewrites == nil {
		return nil, nil
	}
	return p.rewriteRules(m)
}

// WebhookClient returns a client for a webhook at rawURL that the admission relay calls:
// under the target policy (the URL, every address connected to, never this server's own
// certificate), trusting caPEM (the system roots when empty), following no redirect. It keeps
// no connection.
func (p *Proxier) WebhookClient(caPEM []byte, rawURL string) (*http.Client, error) {
	policy := p.Transports.opts.Policy
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("its URL does not parse")
	}
	if err := policy.CheckURL(u); err != nil {
		return nil, err
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12, VerifyConnection: refuseOwnCertificate(policy)}
	if len(caPEM) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("its caBundle holds no certificate")
		}
		tlsConfig.RootCAs = pool
	}
	dialer := net.Dialer{Timeout: 10 * time.Second}
	return &http.Client{
		// A webhook is called at the URL it was registered with: a redirect (to plain http, to
		// an address of the operator's) would send a tenant's AdmissionReview wherever the
		// webhook chooses, past the checks of its URL.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			TLSClientConfig: tlsConfig,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return dialAllowed(ctx, dialer, policy, network, addr)
			},
			DisableKeepAlives: true,
		}}, nil
}

// rewriteRules returns the compiled rules of a mount with spec.rewrites (nil when they rename
// nothing). Validation refuses rules that do not compile, so an error here means a Mount
// stored before validation knew better: the proxy refuses it rather than guess.
func (p *Proxier) rewriteRules(m *mounts.Mount) (*rewrite.Rules, error) {
	rules, err := p.compiled.get(m)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("mount %q: spec.rewrites: %w", m.Name, err))
	}
	return rules, nil
}

// rewriting is what a renamed request's response needs.
type rewriting struct {
	req   rewrite.Request
	ctx   context.Context // the caller's request
	mount string
	// buffers lends the buffer of the answer's first piece.
	buffers *bufferPool
	// crdName is the target and presented name of the CRD the request's path names, if
	// renamed.
	crdName [2]string
	// webhooks: the response holds webhook configurations, whose clientConfigs are restored.
	webhooks bool
}

// rewriteRequest rewrites a request of a renaming mount from presented to target names: path
// and query always (upgrades only these), and for requests whose bodies and responses are
// rewritten the body (bounded), Accept (JSON only) and Accept-Encoding (identity, so that
// the response can be read). It answers the caller itself and returns false when the request
// cannot be sent.
func (h *requestHandler) rewriteRequest(w http.ResponseWriter, out *http.Request, location *url.URL, upgrade bool) bool {
	query := out.URL.Query()
	rq, err := h.rules.Request(out.Method, h.innerPath, query)
	if err != nil {
		writeStatus(w, newStatus(http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("mount %q renames APIs and cannot rewrite this request: %v", h.mount.Name, err)))
		return false
	}
	switch {
	case rq.Class == rewrite.NotFound:
		writeStatus(w, newStatus(http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource"))
		return false
	case rq.Class == rewrite.Untouched && rq.Path == h.innerPath:
		return true
	}
	var crdName [2]string
	if rq.Class == rewrite.Objects {
		// pkg/rewrite renames a CRD named in the path; a Status about it still names it in
		// target names (details.name), which the response side renames back.
		if renamed, names := h.renameCRDInPath(h.innerPath); names[0] != "" {
			crdName = names
			if rq.Path == h.innerPath {
				rq.Path = renamed
			}
		}
	}
	joined, err := JoinPath(h.target.Base.Path, rq.Path)
	if err != nil {
		writeStatus(w, newStatus(http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error()))
		return false
	}
	location.Path = joined
	if rq.Class != rewrite.Untouched {
		location.RawQuery = rq.Query.Encode()
	}
	if upgrade || !rq.Class.Rewrites() || opaqueSubresource(rq.Path) {
		return true
	}

	webhooks := ""
	if rq.Class == rewrite.Objects {
		webhooks = admissionrelay.Kind(rq.Path)
	}
	accept, ok := negotiateJSON(out.Header.Values("Accept"))
	if !ok {
		writeStatus(w, newStatus(http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable, fmt.Sprintf(
			"mount %q renames APIs and answers renamed requests in JSON only; accept application/json", h.mount.Name)))
		return false
	}
	out.Header.Set("Accept", accept)
	// The target's answer must be read to be rewritten; Go's transport still asks for gzip
	// on its own connection and decompresses it.
	out.Header.Del("Accept-Encoding")

	if hasBody(out) {
		if enc := out.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
			writeStatus(w, newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, fmt.Sprintf(
				"mount %q renames APIs and rewrites request bodies: send them without Content-Encoding", h.mount.Name)))
			return false
		}
		body, status := readBounded(out.Body)
		_ = out.Body.Close()
		if status != nil {
			writeStatus(w, status)
			return false
		}
		contentType := out.Header.Get("Content-Type")
		if rq.Class == rewrite.Objects {
			// kubectl and typed clients send built-in objects as protobuf: decode them with
			// client-go's scheme and send JSON, which can be rewritten.
			if body, contentType, err = protobufToJSON(contentType, body); err != nil {
				writeStatus(w, newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, fmt.Sprintf("mount %q renames APIs: %v", h.mount.Name, err)))
				return false
			}
			out.Header.Set("Content-Type", contentType)
		}
		rewritten, err := rq.Body(contentType, body)
		if err != nil {
			var unsupported *rewrite.UnsupportedMediaTypeError
			if errors.As(err, &unsupported) {
				writeStatus(w, newStatus(http.StatusUnsupportedMediaType, metav1.StatusReasonUnsupportedMediaType, fmt.Sprintf("mount %q renames APIs: %v", h.mount.Name, err)))
			} else {
				writeStatus(w, newStatus(http.StatusBadRequest, metav1.StatusReasonBadRequest, fmt.Sprintf("mount %q renames APIs and cannot rewrite this body: %v", h.mount.Name, err)))
			}
			return false
		}
		if webhooks != "" && out.Method == http.MethodPatch {
			// The patch is applied here to the configuration as the caller sees it, and the
			// result sent as an update, so that every webhook in it is relayed again.
			var refused *metav1.Status
			if rewritten, refused = h.patchWebhookConfig(out.Context(), out, *location, webhooks, contentType, rewritten); refused != nil {
				writeStatus(w, refused)
				return false
			}
			out.Method = http.MethodPut
			out.Header.Set("Content-Type", "application/json")
			query := location.Query()
			query.Del("force") // apply only; PUT refuses it
			location.RawQuery = query.Encode()
		}
		if webhooks != "" && (out.Method == http.MethodPost || out.Method == http.MethodPut) {
			if rewritten, ok = h.serveWebhookWrite(out.Context(), w, webhooks, rewritten); !ok {
				return false
			}
		}
		out.Body = io.NopCloser(bytes.NewReader(rewritten))
		out.ContentLength = int64(len(rewritten))
		out.Header.Set("Content-Length", strconv.Itoa(len(rewritten)))
		out.GetBody = nil
	}
	h.rewriting = &rewriting{req: rq.WithBudget(out.Context(), h.proxier.RewriteBudget), ctx: out.Context(), mount: h.mount.Name, crdName: crdName, webhooks: webhooks != "", buffers: &h.proxier.buffers}
	return true
}

// hasBody: a request that may carry a body the target reads (DeleteOptions included).
func hasBody(r *http.Request) bool {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return false
	}
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// readBounded reads a body of at most MaxRewrittenBodyBytes.
func readBounded(body io.Reader) ([]byte, *metav1.Status) {
	data, err := io.ReadAll(io.LimitReader(body, MaxRewrittenBodyBytes+1))
	switch {
	case err != nil:
		return nil, newStatus(http.StatusBadRequest, metav1.StatusReasonBadRequest, "reading the request body failed")
	case len(data) > MaxRewrittenBodyBytes:
		return nil, newStatus(http.StatusRequestEntityTooLarge, metav1.StatusReasonRequestEntityTooLarge,
			fmt.Sprintf("the request body exceeds the %d bytes a renaming mount rewrites", MaxRewrittenBodyBytes))
	}
	return data, nil
}

// negotiateJSON keeps the JSON entries of Accept (their parameters too: as=Table, aggregated
// discovery) and turns wildcards into application/json. ok is false when the caller accepts
// nothing JSON at all, e.g. protobuf only.
func negotiateJSON(values []string) (string, bool) {
	if len(values) == 0 {
		return "application/json", true
	}
	var kept []string
	wildcard := false
	for _, v := range values {
		for entry := range strings.SplitSeq(v, ",") {
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			mt, _, err := mime.ParseMediaType(entry)
			if err != nil {
				continue
			}
			switch {
			case mt == "application/json":
				kept = append(kept, entry)
			case mt == "*/*" || mt == "application/*":
				wildcard = true
			}
		}
	}
	if wildcard {
		kept = append(kept, "application/json")
	}
	if len(kept) == 0 {
		return "", false
	}
	return strings.Join(kept, ","), true
}

// response rewrites the target's answer to presented names as it streams: Lists item by
// item, watches frame by frame. A protobuf or CBOR answer, which the negotiated Accept does
// not allow, is refused rather than passed with the target's names in it.
//
// The answer's status is not sent yet: its first piece (an object, a List's members before
// its items and the items at hand, up to 32 KiB; a discovery or OpenAPI document) is
// rewritten here, so that an answer that cannot be rewritten (too deep, too large, malformed)
// is a 502 naming the mount, and a document the rewrite memory budget has no room for a 503
// to retry. A List whose later item cannot be rewritten ends broken, as a failing target's
// would; a watch ends with an ERROR event.
func (r *rewriting) response(res *http.Response) error {
	if enc := res.Header.Get("Content-Encoding"); enc != "" && enc != "identity" {
		return fmt.Errorf("%w: the target answered with Content-Encoding %q", errUnrewritable, enc)
	}
	ct := res.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	switch {
	case strings.Contains(mt, "protobuf") || strings.Contains(mt, "cbor"):
		return fmt.Errorf("%w: the target answered in %s", errUnrewritable, mt)
	case mt == "text/plain" && r.req.Class == rewrite.OpenAPI:
		// kube-apiserver serves the OpenAPI v3 index, JSON, as text/plain.
		ct = "application/json"
	}
	var body io.Reader = res.Body
	if r.crdName[0] != "" && res.StatusCode >= 400 {
		// A Status about the CRD names it in details.name, in target names.
		data, err := io.ReadAll(io.LimitReader(res.Body, maxStatusBytes))
		if err != nil {
			return fmt.Errorf("reading the target's error: %w", err)
		}
		body = bytes.NewReader(bytes.ReplaceAll(data, []byte(r.crdName[0]), []byte(r.crdName[1])))
	}
	target := &targetBody{r: body}
	rewritten := r.req.Response(ct, target)
	var primedBody *primed
	closer, _ := rewritten.(io.Closer) // gives back what a document holds of the budget
	if r.webhooks {
		rewritten = admissionrelay.RestoreStream(rewritten, r.req.Watch)
	}
	if r.req.Watch {
		rewritten = &watchErrors{r: rewritten, ctx: r.ctx, target: target, mount: r.mount}
	} else {
		p := &primed{buffers: r.buffers, rest: rewritten}
		p.buf = r.buffers.Get()
		var err error
		for p.end == 0 && err == nil {
			p.end, err = rewritten.Read(p.buf)
		}
		if err != nil && err != io.EOF {
			p.release()
			if closer != nil {
				_ = closer.Close()
			}
			return answerError(target, err)
		}
		rewritten, primedBody = p, p
	}
	res.Body = rewrittenBody{Reader: rewritten, Closer: res.Body, rewriter: closer, primed: primedBody}
	res.Header.Del("Content-Length")
	res.ContentLength = -1
	return nil
}

// primed is an answer whose first piece was read before its status was sent: that piece
// (in a buffer of the pool, given back once read), then the rest.
type primed struct {
	buffers  *bufferPool
	buf      []byte
	off, end int
	rest     io.Reader
}

func (p *primed) Read(b []byte) (int, error) {
	if p.off < p.end {
		n := copy(b, p.buf[p.off:p.end])
		p.off += n
		if p.off == p.end {
			p.release()
		}
		return n, nil
	}
	return p.rest.Read(b)
}

// release gives the buffer back to the pool (once).
func (p *primed) release() {
	if p.buf != nil {
		p.buffers.Put(p.buf)
		p.buf, p.off, p.end = nil, 0, 0
	}
}

// answerError classifies an error of the rewriter: a failure to read the target's answer
// stays what it is (its Status says what failed, never why), a busy budget stays ErrBusy
// (503), and an answer that cannot be rewritten is errUnrewritable (502, with the reason).
func answerError(target *targetBody, err error) error {
	switch {
	case target.err != nil || errors.Is(err, rewrite.ErrBusy) || errors.Is(err, errUnrewritable):
		return err
	case err == io.ErrUnexpectedEOF:
		return fmt.Errorf("%w: the answer ends in the middle of a JSON value", errUnrewritable)
	}
	return fmt.Errorf("%w: %w", errUnrewritable, err)
}

var errUnrewritable = errors.New("a renaming mount cannot rewrite the target's answer")

// targetBody reads the target's answer and keeps the first error reading it, so that the
// rewriter's errors can be told apart: the connection failed, or the answer is what it is.
type targetBody struct {
	r   io.Reader
	err error
}

func (t *targetBody) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && err != io.EOF && t.err == nil {
		t.err = err
	}
	return n, err
}

// watchErrors ends a watch whose next event cannot be rewritten with an ERROR event carrying
// a 502 Status that names the mount, as kube-apiserver ends a watch it cannot go on with: a
// reflector sees why, instead of a broken stream. A failure to read the target, and an event
// cut short because the request ended (the caller left, the server shuts down), end the
// stream as they would without rewrites.
type watchErrors struct {
	r      io.Reader
	ctx    context.Context
	target *targetBody
	mount  string
	event  []byte // the ERROR event, not read yet
	ended  bool
}

func (w *watchErrors) Read(p []byte) (int, error) {
	if !w.ended {
		n, err := w.r.Read(p)
		if err == nil || err == io.EOF {
			return n, err
		}
		unrewritable := answerError(w.target, err)
		if !errors.Is(unrewritable, errUnrewritable) || w.ctx.Err() != nil {
			return n, err
		}
		w.ended = true
		w.event = watchErrorEvent(newStatus(http.StatusBadGateway, ReasonBadGateway, fmt.Sprintf("mount %q: %v", w.mount, unrewritable)))
		if n > 0 {
			return n, nil
		}
	}
	if len(w.event) == 0 {
		return 0, io.EOF
	}
	n := copy(p, w.event)
	w.event = w.event[n:]
	return n, nil
}

// watchErrorEvent is an ERROR watch event of status, a line of its own.
func watchErrorEvent(status *metav1.Status) []byte {
	obj, _ := json.Marshal(status)
	ev, _ := json.Marshal(metav1.WatchEvent{Type: "ERROR", Object: runtime.RawExtension{Raw: obj}})
	return append(ev, '\n')
}

type rewrittenBody struct {
	io.Reader
	io.Closer
	// rewriter, if set, is closed too: it gives back what it holds of the budget.
	rewriter io.Closer
	// primed, if set, gives its buffer back.
	primed *primed
}

func (b rewrittenBody) Close() error {
	if b.rewriter != nil {
		_ = b.rewriter.Close()
	}
	if b.primed != nil {
		b.primed.release()
	}
	return b.Closer.Close()
}

// protobufMediaType is Kubernetes' protobuf encoding.
const protobufMediaType = "application/vnd.kubernetes.protobuf"

// protobufDecoder decodes the protobuf of every type client-go knows: the built-in kinds and
// the option kinds (DeleteOptions).
var protobufDecoder = protobuf.NewSerializer(clientgoscheme.Scheme, clientgoscheme.Scheme)

// protobufToJSON turns a protobuf body of a built-in kind into JSON; other bodies pass as
// they are. A protobuf body of a kind client-go does not know is an error (answer 415).
func protobufToJSON(contentType string, body []byte) ([]byte, string, error) {
	if mt, _, _ := mime.ParseMediaType(contentType); mt != protobufMediaType || len(body) == 0 {
		return body, contentType, nil
	}
	obj, gvk, err := protobufDecoder.Decode(body, nil, nil)
	if err != nil {
		return nil, "", fmt.Errorf("a protobuf body can be rewritten only for built-in kinds, and this one does not decode as one (%v): send JSON", err)
	}
	obj.GetObjectKind().SetGroupVersionKind(*gvk)
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, "", fmt.Errorf("encoding a protobuf body as JSON: %w", err)
	}
	return data, "application/json", nil
}

// crdPath matches the path of one CRD: /apis/apiextensions.k8s.io/<version>/customresourcedefinitions/<name>[/status].
const crdPathPrefix = "/apis/apiextensions.k8s.io/"

// renameCRDInPath renames the CRD named in a path (<plural>.<group> of a renamed group) to
// its target name, by asking the rules where the CRD's resource goes.
// It returns the path and, if renamed, the CRD's target and presented name.
func (h *requestHandler) renameCRDInPath(p string) (string, [2]string) {
	rest, ok := strings.CutPrefix(p, crdPathPrefix)
	if !ok {
		return p, [2]string{}
	}
	parts := strings.Split(rest, "/")
	if len(parts) < 3 || parts[1] != "customresourcedefinitions" {
		return p, [2]string{}
	}
	plural, group, ok := strings.Cut(parts[2], ".")
	if !ok || plural == "" {
		return p, [2]string{}
	}
	probe, err := h.rules.Request(http.MethodGet, "/apis/"+group+"/v1/"+plural, nil)
	if err != nil || probe.Class != rewrite.Resource {
		return p, [2]string{}
	}
	target := strings.Split(strings.TrimPrefix(probe.Path, "/"), "/")
	if len(target) != 4 {
		return p, [2]string{}
	}
	presented := parts[2]
	parts[2] = target[3] + "." + target[1]
	return crdPathPrefix + strings.Join(parts, "/"), [2]string{parts[2], presented}
}

// maxStatusBytes bounds an error answer about a renamed CRD that is read whole.
const maxStatusBytes = 1 << 20

// opaqueSubresources carry bytes that are no Kubernetes objects: proxied services, pods and
// nodes, logs, and the streams of exec, attach and port-forward.
var opaqueSubresources = map[string]bool{"proxy": true, "log": true, "exec": true, "attach": true, "portforward": true}

// opaqueSubresource reports whether a core path names such a subresource
// (/api/v1/[namespaces/<ns>/]<resource>/<name>/<subresource>...): its path is renamed like any,
// its body and answer pass as they are.
func opaqueSubresource(p string) bool {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(parts) < 3 || parts[0] != "api" {
		return false
	}
	parts = parts[2:]
	if len(parts) >= 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	return len(parts) >= 3 && opaqueSubresources[parts[2]]
}
