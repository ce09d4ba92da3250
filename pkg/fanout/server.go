package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/klog/v2"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/v1alpha1"
)

// DefaultMemberTimeout is how long a member may take to answer (a list whole, a watch its
// start) before the fan-out answers without it.
const DefaultMemberTimeout = 10 * time.Second

// Defaults of the bounds of one fan-out request.
const (
	// DefaultMaxConcurrency bounds the member requests of one fan-out in flight at once.
	DefaultMaxConcurrency = 64
	// DefaultMaxPageBytes bounds the items of one page of a paged list, which is buffered
	// whole so that every member that failed is named in its Warnings.
	DefaultMaxPageBytes = 32 << 20
	// DefaultMaxBufferedBytes bounds what one member of an unpaged list or a watch has read
	// ahead of the client.
	DefaultMaxBufferedBytes = 256 << 10
	// DefaultMaxStreamBytes bounds what all members of one unpaged list or watch have read
	// ahead of the client.
	DefaultMaxStreamBytes = 64 << 20
)

// HopsHeader is the proxy's count of mount proxies a request has passed (pkg/proxy).
const HopsHeader = "X-Mount-Proxy-Hops"

// ListFunc lists the Mounts of the request's logical cluster that selector selects.
type ListFunc func(ctx context.Context, selector labels.Selector) ([]*mounts.Mount, error)

// TransportFunc returns the round tripper of one member: a request to it is a request to the
// mount's target as the caller of its context, its URL's path the Kubernetes path (what
// follows mounts/<name>/proxy).
type TransportFunc func(m *mounts.Mount) http.RoundTripper

// Server serves mounts/*/proxy.
type Server struct {
	// Transport reaches the members.
	Transport TransportFunc
	// Authorizer decides which mounts a caller may use: get on mounts/proxy for each name.
	Authorizer authorizer.Authorizer
	// MemberTimeout bounds a member's answer (DefaultMemberTimeout when 0).
	MemberTimeout time.Duration
	// MaxConcurrency bounds the member requests of one fan-out in flight at once.
	MaxConcurrency int
	// MaxPageBytes bounds a page of a paged list.
	MaxPageBytes int
	// MaxBufferedBytes bounds what a member of an unpaged list or a watch reads ahead.
	MaxBufferedBytes int
	// MaxStreamBytes bounds what all members of an unpaged list or a watch read ahead.
	MaxStreamBytes int
	// MinWatchTimeout: a watch without timeoutSeconds ends after a random time between it
	// and twice it, as kube-apiserver's (--min-request-timeout); 30 minutes when 0.
	MinWatchTimeout time.Duration
}

func (s *Server) memberTimeout() time.Duration {
	if s.MemberTimeout > 0 {
		return s.MemberTimeout
	}
	return DefaultMemberTimeout
}

func (s *Server) maxConcurrency() int {
	if s.MaxConcurrency > 0 {
		return s.MaxConcurrency
	}
	return DefaultMaxConcurrency
}

func (s *Server) maxPageBytes() int {
	if s.MaxPageBytes > 0 {
		return s.MaxPageBytes
	}
	return DefaultMaxPageBytes
}

func (s *Server) maxStreamBytes() int {
	if s.MaxStreamBytes > 0 {
		return s.MaxStreamBytes
	}
	return DefaultMaxStreamBytes
}

func (s *Server) maxBufferedBytes() int {
	if s.MaxBufferedBytes > 0 {
		return s.MaxBufferedBytes
	}
	return DefaultMaxBufferedBytes
}

// Handler returns the handler of one request to mounts/*/proxy/<inner>; list lists the
// Mounts of the request's cluster. Errors are API errors, written as they are.
func (s *Server) Handler(ctx context.Context, list ListFunc, inner string) (http.Handler, error) {
	p, err := ParsePath(inner)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if _, ok := genericapirequest.UserFrom(ctx); !ok {
		return nil, apierrors.NewUnauthorized("no user in the request")
	}
	return &handler{server: s, list: list, path: p}, nil
}

type handler struct {
	server *Server
	list   ListFunc
	path   Path
}

// member is one mount of a fan-out.
type member struct {
	name  string
	mount *mounts.Mount
	rt    http.RoundTripper
}

func (h *handler) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	if hop := req.Header.Get(HopsHeader); hop != "" && hop != "0" {
		// A mount whose target leads back to a fan-out would fan every member out again.
		writeStatus(w, newStatus(http.StatusLoopDetected, "LoopDetected",
			"mounts/*/proxy is not served to requests that have passed a mount proxy already: a fan-out through a fan-out would multiply every request"))
		return
	}
	r := classify(req.Method, h.path.Kube, req.URL.Query())
	if r.kind == kindRefused {
		writeStatus(w, newStatus(int32(r.code), reasonFor(r.code), r.refusal))
		return
	}
	accept, ok := negotiateJSON(req.Header.Values("Accept"))
	if !ok {
		writeStatus(w, newStatus(http.StatusNotAcceptable, metav1.StatusReasonNotAcceptable,
			"mounts/*/proxy answers in JSON only (lists, Tables, watches, discovery): accept application/json"))
		return
	}
	sel, err := splitSelectors(r.query)
	if err != nil {
		writeStatus(w, newStatus(http.StatusBadRequest, metav1.StatusReasonBadRequest, err.Error()))
		return
	}
	members, status := h.members(ctx, sel)
	if status != nil {
		writeStatus(w, status)
		return
	}
	f := &fanout{server: h.server, req: req, r: r, accept: accept, sel: sel, members: members, path: h.path}
	switch r.kind {
	case kindDiscovery:
		f.serveDiscovery(w)
	case kindList:
		f.serveList(w)
	case kindWatch:
		f.serveWatch(w)
	}
}

// members lists the selected Mounts and keeps those the caller may proxy through, in name
// order.
func (h *handler) members(ctx context.Context, sel memberSelectors) ([]*member, *metav1.Status) {
	caller, _ := genericapirequest.UserFrom(ctx)
	all, err := h.list(ctx, h.path.Selector)
	if err != nil {
		s := apierrors.NewInternalError(fmt.Errorf("listing the mounts: %w", err)).Status()
		if st, ok := err.(apierrors.APIStatus); ok {
			s = st.Status()
		}
		return nil, &s
	}
	var selected []*mounts.Mount
	for _, m := range all {
		if sel.selects(m.Name) {
			selected = append(selected, m)
		}
	}
	sort.Slice(selected, func(i, j int) bool { return selected[i].Name < selected[j].Name })
	allowed, reasons := h.server.authorize(ctx, caller, namesOf(selected))
	var members []*member
	refusal := ""
	for i, m := range selected {
		if allowed[i] {
			members = append(members, &member{name: m.Name, mount: m, rt: h.server.Transport(m)})
		} else if refusal == "" && reasons[i] != "" {
			refusal = fmt.Sprintf(" (mount %q: %s)", m.Name, reasons[i])
		}
	}
	if len(members) == 0 {
		what := "no mount"
		if len(selected) > 0 {
			what = fmt.Sprintf("none of the %d mounts selected", len(selected))
		} else if h.path.SelectorText != "" {
			what = fmt.Sprintf("no mount with labels %s", h.path.SelectorText)
		}
		return nil, newStatus(http.StatusForbidden, metav1.StatusReasonForbidden,
			fmt.Sprintf("mounts/*/proxy: %s may be proxied through by you (get on mounts/proxy is checked for each mount)%s", what, refusal))
	}
	return members, nil
}

func namesOf(ms []*mounts.Mount) []string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = m.Name
	}
	return names
}

// authorize checks get on mounts/proxy for each name, concurrently (in delegated mode each
// check may be a SubjectAccessReview); reasons say why a name was refused.
func (s *Server) authorize(ctx context.Context, caller user.Info, names []string) (allowed []bool, reasons []string) {
	allowed, reasons = make([]bool, len(names)), make([]string, len(names))
	if s.Authorizer == nil {
		return allowed, reasons
	}
	sem := make(chan struct{}, min(s.maxConcurrency(), 16))
	var wg sync.WaitGroup
	for i, name := range names {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			decision, reason, err := s.Authorizer.Authorize(ctx, authorizer.AttributesRecord{
				User:            caller,
				Verb:            "get",
				APIGroup:        mounts.GroupName,
				APIVersion:      v1alpha1.SchemeGroupVersion.Version,
				Resource:        "mounts",
				Subresource:     "proxy",
				Name:            name,
				ResourceRequest: true,
			})
			allowed[i] = decision == authorizer.DecisionAllow
			if err != nil {
				reason = err.Error()
			}
			reasons[i] = reason
		}()
	}
	wg.Wait()
	return allowed, reasons
}

// fanout is one request across its members.
type fanout struct {
	server  *Server
	req     *http.Request
	r       request
	accept  string
	sel     memberSelectors
	members []*member
	path    Path
	// watchBudget bounds the bytes all members of a watch have read ahead of the client.
	watchBudget *semaphore.Weighted
}

// memberQuery is the query a member is asked: the caller's, with the selectors split.
func (f *fanout) memberQuery(m *member) url.Values {
	q := url.Values{}
	for k, v := range f.r.query {
		switch k {
		case "labelSelector", "fieldSelector", "continue", "limit", "resourceVersion", "resourceVersionMatch", "timeoutSeconds",
			"watch", "allowWatchBookmarks", "sendInitialEvents":
			// The fan-out asks these of each member itself.
			continue
		}
		q[k] = v
	}
	if f.sel.labelSelector != "" {
		q.Set("labelSelector", f.sel.labelSelector)
	}
	if fs := f.sel.fieldSelectorFor(m.name); fs != "" {
		q.Set("fieldSelector", fs)
	}
	return q
}

// send sends a GET of path?query to m, as the caller, with the negotiated Accept.
func (f *fanout) send(ctx context.Context, m *member, path string, query url.Values, accept string) (*http.Response, error) {
	u := &url.URL{Scheme: "https", Host: "member", Path: path, RawQuery: query.Encode()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	if ua := f.req.Header.Get("User-Agent"); ua != "" {
		req.Header.Set("User-Agent", ua)
	}
	if a := f.req.Header.Get("Audit-Id"); a != "" {
		req.Header.Set("Audit-Id", a)
	}
	return m.rt.RoundTrip(req)
}

// memberError is why a member did not take part.
type memberError struct {
	code    int
	reason  metav1.StatusReason
	message string
}

func (e *memberError) Error() string { return e.message }

// maxStatusBytes bounds the error body of a member that is read.
const maxStatusBytes = 64 << 10

// errorOf reads a member's answer that is no success.
func errorOf(resp *http.Response) *memberError {
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes))
	e := &memberError{code: resp.StatusCode, message: http.StatusText(resp.StatusCode)}
	var s metav1.Status
	if json.Unmarshal(data, &s) == nil && s.Kind == "Status" {
		if s.Message != "" {
			e.message = s.Message
		}
		e.reason = s.Reason
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		e.message = fmt.Sprintf("the mount answered with a redirect (%d) instead of a list", resp.StatusCode)
	}
	return e
}

// failure turns an error of a member's request into a memberError.
func failure(ctx context.Context, err error, timeout time.Duration) *memberError {
	var me *memberError
	switch {
	case errors.As(err, &me):
		return me
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return &memberError{code: http.StatusGatewayTimeout, reason: metav1.StatusReasonTimeout, message: fmt.Sprintf("no answer within %s", timeout)}
	case errors.Is(err, errTooLarge), errors.Is(err, errMalformed):
		return &memberError{code: http.StatusBadGateway, reason: "BadGateway", message: "its answer is unusable: " + err.Error()}
	}
	return &memberError{code: http.StatusBadGateway, reason: "BadGateway", message: "its answer broke off"}
}

// maxWarnedMembers bounds the members named one Warning each; the rest share one.
const maxWarnedMembers = 20

// warn names the failed members in Warning headers (kubectl prints them), in name order.
func warn(ctx context.Context, failed map[string]*memberError) {
	names := make([]string, 0, len(failed))
	for n := range failed {
		names = append(names, n)
	}
	sort.Strings(names)
	for i, n := range names {
		if i == maxWarnedMembers {
			rest := names[i:]
			warning.AddWarning(ctx, "", fmt.Sprintf("%d more mounts did not take part: %s", len(rest), strings.Join(rest, ", ")))
			break
		}
		warning.AddWarning(ctx, "", fmt.Sprintf("mount %q did not take part: %s", n, oneLine(failed[n].message)))
	}
}

// oneLine makes a member's message fit a header.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 400 {
		s = s[:400] + "..."
	}
	return s
}

// negotiateJSON keeps the JSON entries of Accept (with their parameters: as=Table, aggregated
// discovery) and turns wildcards into application/json. ok is false when the caller accepts
// nothing JSON.
func negotiateJSON(values []string) (string, bool) {
	if len(values) == 0 {
		return "application/json", true
	}
	var kept []string
	wildcard := false
	for _, v := range values {
		for entry := range strings.SplitSeq(v, ",") {
			entry = strings.TrimSpace(entry)
			mt, _, err := mime.ParseMediaType(entry)
			if err != nil {
				continue
			}
			switch mt {
			case "application/json":
				kept = append(kept, entry)
			case "*/*", "application/*":
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

// isJSON says whether a member answered in JSON.
func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

func newStatus(code int32, reason metav1.StatusReason, message string) *metav1.Status {
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status:   metav1.StatusFailure,
		Code:     code,
		Reason:   reason,
		Message:  message,
	}
}

func reasonFor(code int) metav1.StatusReason {
	switch code {
	case http.StatusMethodNotAllowed:
		return metav1.StatusReasonMethodNotAllowed
	case http.StatusNotFound:
		return metav1.StatusReasonNotFound
	case http.StatusForbidden:
		return metav1.StatusReasonForbidden
	case http.StatusGone:
		return metav1.StatusReasonExpired
	case http.StatusServiceUnavailable:
		return metav1.StatusReasonServiceUnavailable
	case http.StatusGatewayTimeout:
		return metav1.StatusReasonTimeout
	}
	return metav1.StatusReasonBadRequest
}

// writeStatus writes s as JSON. No Retry-After on 503: client-go would retry a fan-out whose
// members all failed ten times over.
func writeStatus(w http.ResponseWriter, s *metav1.Status) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(int(s.Code))
	_ = json.NewEncoder(w).Encode(s)
}

// allFailed answers a fan-out whose members all failed: their common error when they agree
// (a resource no mount serves is 404, as kubectl expects), else 503 naming them.
func allFailed(w http.ResponseWriter, failed map[string]*memberError) {
	var first *memberError
	same := true
	for _, e := range failed {
		if first == nil {
			first = e
		} else if e.code != first.code {
			same = false
		}
	}
	if first == nil {
		writeStatus(w, newStatus(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "no mount answered"))
		return
	}
	if same && first.code >= 400 && first.code < 500 {
		reason := first.reason
		if reason == "" {
			reason = reasonFor(first.code)
		}
		writeStatus(w, newStatus(int32(first.code), reason, fmt.Sprintf("no mount answered: %s (%d mounts)", first.message, len(failed))))
		return
	}
	names := make([]string, 0, len(failed))
	for n := range failed {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) > maxWarnedMembers {
		names = append(names[:maxWarnedMembers], "...")
	}
	writeStatus(w, newStatus(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable,
		fmt.Sprintf("no mount answered (%s); the Warnings say why", strings.Join(names, ", "))))
}

func userFrom(ctx context.Context) (user.Info, bool) { return genericapirequest.UserFrom(ctx) }

// logger is the request's logger.
func (f *fanout) logger() klog.Logger { return klog.FromContext(f.req.Context()) }

// queryInt reads an integer parameter.
func queryInt(q url.Values, key string) (int64, error) {
	v := q.Get(key)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s: %q is not a non-negative integer", key, v)
	}
	return n, nil
}
