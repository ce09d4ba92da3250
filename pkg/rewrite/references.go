package rewrite

import (
	"strings"

	"github.com/tidwall/gjson"
)

// kindOfResource names the kinds that carry references to groups, by the target's (which are
// also the presented) group and resource, for list items and bodies without apiVersion/kind.
var kindOfResource = map[[2]string]typeHint{
	{"apiextensions.k8s.io", "customresourcedefinitions"}:                 {"apiextensions.k8s.io/v1", "CustomResourceDefinition"},
	{"rbac.authorization.k8s.io", "roles"}:                                {"rbac.authorization.k8s.io/v1", "Role"},
	{"rbac.authorization.k8s.io", "clusterroles"}:                         {"rbac.authorization.k8s.io/v1", "ClusterRole"},
	{"admissionregistration.k8s.io", "validatingwebhookconfigurations"}:   {"admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"},
	{"admissionregistration.k8s.io", "mutatingwebhookconfigurations"}:     {"admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"},
	{"admissionregistration.k8s.io", "validatingadmissionpolicies"}:       {"admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"},
	{"admissionregistration.k8s.io", "validatingadmissionpolicybindings"}: {"admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"},
	{"admissionregistration.k8s.io", "mutatingadmissionpolicies"}:         {"admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"},
	{"admissionregistration.k8s.io", "mutatingadmissionpolicybindings"}:   {"admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"},
	{"authorization.k8s.io", "subjectaccessreviews"}:                      {"authorization.k8s.io/v1", "SubjectAccessReview"},
	{"authorization.k8s.io", "selfsubjectaccessreviews"}:                  {"authorization.k8s.io/v1", "SelfSubjectAccessReview"},
	{"authorization.k8s.io", "localsubjectaccessreviews"}:                 {"authorization.k8s.io/v1", "LocalSubjectAccessReview"},
	{"authorization.k8s.io", "selfsubjectrulesreviews"}:                   {"authorization.k8s.io/v1", "SelfSubjectRulesReview"},
	{"", "events"}:              {"v1", "Event"},
	{"events.k8s.io", "events"}: {"events.k8s.io/v1", "Event"},
}

// referenceEdits renames the groups, resources and kinds that objects of other groups name.
func (r *Rules) referenceEdits(d direction, e *editor, doc gjson.Result, group, kind string) {
	switch group {
	case "apiextensions.k8s.io":
		if kind == "CustomResourceDefinition" {
			r.crdEdits(d, e, doc)
		}
	case "rbac.authorization.k8s.io":
		if kind == "Role" || kind == "ClusterRole" {
			r.rulesEdits(d, e, doc.Get("rules"))
		}
	case "admissionregistration.k8s.io":
		switch kind {
		case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
			doc.Get("webhooks").ForEach(func(_, w gjson.Result) bool {
				r.rulesEdits(d, e, w.Get("rules"))
				return true
			})
		case "ValidatingAdmissionPolicy", "MutatingAdmissionPolicy":
			r.matchEdits(d, e, doc.Get("spec.matchConstraints"))
			if pk := doc.Get("spec.paramKind"); pk.IsObject() {
				r.gvkEdits(d, e, pk, "apiVersion", "kind")
			}
		case "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicyBinding":
			r.matchEdits(d, e, doc.Get("spec.matchResources"))
		}
	case "authorization.k8s.io":
		switch kind {
		case "SubjectAccessReview", "SelfSubjectAccessReview", "LocalSubjectAccessReview":
			ra := doc.Get("spec.resourceAttributes")
			g := ra.Get("group")
			if g.Type == gjson.String {
				if ng, nr, ok := r.groupResource(d, g.Str, ra.Get("resource").String()); ok {
					e.setString(g, ng)
					if res := ra.Get("resource"); res.Type == gjson.String && res.Str != nr {
						e.setString(res, nr)
					}
				}
			}
		case "SelfSubjectRulesReview":
			r.rulesEdits(d, e, doc.Get("status.resourceRules"))
		}
	case "":
		if kind == "Event" {
			for _, f := range []string{"involvedObject", "related"} {
				if o := doc.Get(f); o.IsObject() {
					r.gvkEdits(d, e, o, "apiVersion", "kind")
				}
			}
		}
	case "events.k8s.io":
		if kind == "Event" {
			for _, f := range []string{"regarding", "related"} {
				if o := doc.Get(f); o.IsObject() {
					r.gvkEdits(d, e, o, "apiVersion", "kind")
				}
			}
		}
	}
}

// crdEdits renames a CustomResourceDefinition of a renamed group: metadata.name
// (<plural>.<group>), spec.group, spec.names and status.acceptedNames.
func (r *Rules) crdEdits(d direction, e *editor, doc gjson.Result) {
	g := doc.Get("spec.group")
	if g.Type != gjson.String {
		return
	}
	rule := r.ruleForGroup(d, g.Str, doc.Get("spec.names.kind").String(), doc.Get("spec.names.plural").String())
	if rule == nil {
		return
	}
	_, to := rule.side(d)
	e.setString(g, to)
	if n := doc.Get("metadata.name"); n.Type == gjson.String {
		if plural, _, ok := strings.Cut(n.Str, "."); ok {
			np, _ := rule.resource(d, plural)
			e.setString(n, np+"."+to)
		}
	}
	for _, names := range []string{"spec.names", "status.acceptedNames"} {
		r.namesEdits(d, e, rule, doc.Get(names))
	}
}

// namesEdits renames a CustomResourceDefinitionNames: kind and listKind take the kind prefix,
// plural, singular and short names the lower-case one; categories stay.
func (r *Rules) namesEdits(d direction, e *editor, rule *groupRule, names gjson.Result) {
	if !names.IsObject() {
		return
	}
	for _, f := range []string{"kind", "listKind"} {
		if v := names.Get(f); v.Type == gjson.String {
			if nk, ok := rule.kind(d, v.Str); ok {
				e.setString(v, nk)
			}
		}
	}
	for _, f := range []string{"plural", "singular"} {
		if v := names.Get(f); v.Type == gjson.String {
			if nr, ok := rule.resource(d, v.Str); ok {
				e.setString(v, nr)
			}
		}
	}
	if v := names.Get("shortNames"); v.IsArray() {
		if raw, ok := mapStrings(v, func(s string) (string, bool) { return rule.resource(d, s) }); ok {
			e.setRaw(v, raw)
		}
	}
}

// matchEdits renames resourceRules and excludeResourceRules of admission policies' match
// constraints and bindings' match resources.
func (r *Rules) matchEdits(d direction, e *editor, m gjson.Result) {
	if !m.IsObject() {
		return
	}
	for _, f := range []string{"resourceRules", "excludeResourceRules"} {
		r.rulesEdits(d, e, m.Get(f))
	}
}

// rulesEdits renames an array of rules with apiGroups and resources (RBAC PolicyRules,
// admission RuleWithOperations, NamedRuleWithOperations, ResourceRules). Resources are renamed
// when the rule names a renamed group; each picks the rule of its group by its prefix.
func (r *Rules) rulesEdits(d direction, e *editor, rules gjson.Result) {
	rules.ForEach(func(_, rule gjson.Result) bool {
		groups := rule.Get("apiGroups")
		resources := rule.Get("resources")
		// A target group that several rules share is told apart by the prefix of the
		// resources the rule names.
		firstResource := ""
		resources.ForEach(func(_, res gjson.Result) bool {
			if base, _, _ := strings.Cut(res.String(), "/"); base != "*" && base != "" {
				firstResource = base
				return false
			}
			return true
		})
		var renamed []string // the groups of this rule that are renamed, as they come
		if raw, ok := mapStrings(groups, func(g string) (string, bool) {
			if gr := r.ruleForGroup(d, g, "", firstResource); gr != nil {
				renamed = append(renamed, g)
				_, to := gr.side(d)
				return to, true
			}
			return g, false
		}); ok {
			e.setRaw(groups, raw)
		}
		if len(renamed) == 0 {
			return true
		}
		if raw, ok := mapStrings(resources, func(res string) (string, bool) {
			base, _, _ := strings.Cut(res, "/")
			for _, g := range renamed {
				if gr := r.ruleForGroup(d, g, "", base); gr != nil {
					if nr, ok := gr.resource(d, res); ok {
						return nr, true
					}
				}
			}
			return res, false
		}); ok {
			e.setRaw(resources, raw)
		}
		return true
	})
}
