package rewrite

import (
	"encoding/base64"
	"fmt"

	"github.com/tidwall/gjson"
)

// AdmissionReviewToPresented rewrites an AdmissionReview that the target's kube-apiserver
// sends to a webhook into presented names: request.kind, requestKind, resource,
// requestResource, object and oldObject. Reviews of objects of other groups come back with
// only their metadata and references renamed, as any object.
func (r *Rules) AdmissionReviewToPresented(body []byte) ([]byte, error) {
	if r == nil {
		return body, nil
	}
	if err := CheckJSON(body); err != nil {
		return nil, fmt.Errorf("AdmissionReview: %w", err)
	}
	doc := gjson.ParseBytes(body)
	if !doc.IsObject() {
		return nil, fmt.Errorf("AdmissionReview is not a JSON object")
	}
	req := doc.Get("request")
	if !req.IsObject() {
		return nil, fmt.Errorf("AdmissionReview has no request")
	}
	const d = toPresented
	e := &editor{data: body}
	for _, f := range []string{"kind", "requestKind"} {
		k := req.Get(f)
		if !k.IsObject() {
			continue
		}
		if rule := r.ruleForGroup(d, k.Get("group").String(), k.Get("kind").String(), ""); rule != nil {
			e.setString(k.Get("group"), rule.presented)
			if nk, ok := rule.kind(d, k.Get("kind").String()); ok {
				e.setString(k.Get("kind"), nk)
			}
		}
	}
	for _, f := range []string{"resource", "requestResource"} {
		res := req.Get(f)
		if !res.IsObject() {
			continue
		}
		if ng, nr, ok := r.groupResource(d, res.Get("group").String(), res.Get("resource").String()); ok {
			e.setString(res.Get("group"), ng)
			if nr != res.Get("resource").String() {
				e.setString(res.Get("resource"), nr)
			}
		}
	}
	hint := typeHint{}
	if k := req.Get("kind"); k.IsObject() {
		av := k.Get("version").String()
		if g := k.Get("group").String(); g != "" {
			av = g + "/" + av
		}
		hint = typeHint{apiVersion: av, kind: k.Get("kind").String()}
	}
	for _, f := range []string{"object", "oldObject"} {
		if o := req.Get(f); o.IsObject() {
			r.objectEdits(d, e, o, hint)
		}
	}
	return e.bytes()
}

// AdmissionResponseToTarget rewrites a webhook's AdmissionReview response for the target:
// the JSONPatch in response.patch (base64) is rewritten presented -> target. Other patch
// types are refused, as kube-apiserver refuses them.
func (r *Rules) AdmissionResponseToTarget(body []byte) ([]byte, error) {
	if r == nil {
		return body, nil
	}
	if err := CheckJSON(body); err != nil {
		return nil, fmt.Errorf("AdmissionReview: %w", err)
	}
	doc := gjson.ParseBytes(body)
	if !doc.IsObject() {
		return nil, fmt.Errorf("AdmissionReview is not a JSON object")
	}
	resp := doc.Get("response")
	p := resp.Get("patch")
	if !p.Exists() || p.Type == gjson.Null {
		return body, nil
	}
	if pt := resp.Get("patchType").String(); pt != "JSONPatch" {
		return nil, fmt.Errorf("AdmissionReview response.patchType %q is not supported: only JSONPatch", pt)
	}
	patch, err := base64.StdEncoding.DecodeString(p.String())
	if err != nil {
		return nil, fmt.Errorf("AdmissionReview response.patch is not base64: %w", err)
	}
	np, err := r.jsonPatch(toTarget, patch, nil)
	if err != nil {
		return nil, fmt.Errorf("AdmissionReview response.patch: %w", err)
	}
	e := &editor{data: body}
	e.setString(p, base64.StdEncoding.EncodeToString(np))
	return e.bytes()
}
