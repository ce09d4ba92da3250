package validation

import (
	"fmt"
	"regexp"
	"strings"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// Limits of spec.rewrites.
const (
	// MaxRewriteRules bounds each list of rules: a mount renames a handful of groups, and
	// every rule costs each rewritten request a lookup.
	MaxRewriteRules = 32
	// MaxKindPrefixLength leaves room in a resource name (a DNS label of 63) for the
	// lower-cased prefix plus a plural of at least 31 characters.
	MaxKindPrefixLength = 32
	// MaxRewriteGroupLength keeps every renamed CRD name <plural>.<group> within 253
	// characters for any plural that is a DNS label (63): 63 + 1 + 189 = 253.
	MaxRewriteGroupLength = utilvalidation.DNS1123SubdomainMaxLength - utilvalidation.DNS1123LabelMaxLength - 1
)

// kindPrefixRE: a Kind is upper camel case; its prefix, lower-cased, goes into resource
// names, which are DNS labels, so only ASCII letters and digits.
var kindPrefixRE = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)

// legacyBuiltinGroups are the groups Kubernetes serves without a k8s.io suffix.
var legacyBuiltinGroups = map[string]bool{"apps": true, "batch": true, "autoscaling": true, "policy": true, "extensions": true}

// reservedGroup says why a group may not be renamed (either way), or "".
func reservedGroup(g string) string {
	switch {
	case g == mounts.GroupName, g == "kcp.io", strings.HasSuffix(g, ".kcp.io"):
		return "is served by this server or kcp"
	case g == "k8s.io", strings.HasSuffix(g, ".k8s.io"), legacyBuiltinGroups[g]:
		return "is served by Kubernetes itself"
	}
	return ""
}

// reservedKeyPrefix says why a metadata key prefix may not be renamed, or "": keys under
// kubernetes.io and k8s.io carry what Kubernetes components read and write (pod security
// levels, the namespace name label, node roles); renaming them would hide or forge those.
func reservedKeyPrefix(domain string) string {
	for _, d := range []string{"kubernetes.io", "k8s.io"} {
		if domain == d || strings.HasSuffix(domain, "."+d) {
			return "is reserved for Kubernetes (" + d + ")"
		}
	}
	return ""
}

// validateRewrites checks that spec.rewrites is a bijection the proxy can apply in both
// directions: every group and key prefix appears at most once on either side and never on
// both sides (rules never chain, so each name has exactly one image and one preimage), and
// every renamed name stays within the lengths Kubernetes allows: names that would not fit
// are refused here, never truncated later.
func validateRewrites(t mounts.MountType, r *mounts.MountRewrites, fldPath *field.Path) field.ErrorList {
	if r == nil {
		return nil
	}
	if t != mounts.MountTypeURL && (len(r.Groups) > 0 || len(r.MetadataKeyPrefixes) > 0) {
		return field.ErrorList{field.Forbidden(fldPath, "only allowed for type URL")}
	}
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateGroupRewrites(r.Groups, fldPath.Child("groups"))...)
	allErrs = append(allErrs, validatePrefixRewrites(r.MetadataKeyPrefixes, fldPath.Child("metadataKeyPrefixes"))...)
	return allErrs
}

func validateGroupRewrites(rules []mounts.GroupRewrite, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(rules) > MaxRewriteRules {
		return field.ErrorList{field.TooMany(fldPath, len(rules), MaxRewriteRules)}
	}
	presented := map[string]int{}
	target := map[string]int{}
	for i, rule := range rules {
		p := fldPath.Index(i)
		allErrs = append(allErrs, validateRewriteGroup(rule.Presented, p.Child("presented"))...)
		allErrs = append(allErrs, validateRewriteGroup(rule.Target, p.Child("target"))...)
		if rule.Presented != "" && rule.Presented == rule.Target {
			allErrs = append(allErrs, field.Invalid(p.Child("target"), rule.Target, "must differ from presented"))
		}
		if rule.KindPrefix != "" {
			kp := p.Child("kindPrefix")
			switch {
			case len(rule.KindPrefix) > MaxKindPrefixLength:
				allErrs = append(allErrs, field.TooLong(kp, "", MaxKindPrefixLength))
			case !kindPrefixRE.MatchString(rule.KindPrefix):
				allErrs = append(allErrs, field.Invalid(kp, rule.KindPrefix, "must start with an upper-case ASCII letter and consist of ASCII letters and digits (the start of a Kind in upper camel case)"))
			}
		}
		// One to one, refused rather than disambiguated by kind prefixes: prefixes such as
		// "A" and "AB" would make the target kind ABFoo ambiguous.
		if _, ok := presented[rule.Presented]; ok && rule.Presented != "" {
			allErrs = append(allErrs, field.Duplicate(p.Child("presented"), rule.Presented))
		} else {
			presented[rule.Presented] = i
		}
		if _, ok := target[rule.Target]; ok && rule.Target != "" {
			allErrs = append(allErrs, field.Invalid(p.Child("target"), rule.Target, "another rule renames a group to this target group already: renames must be one to one"))
		} else {
			target[rule.Target] = i
		}
	}
	for i, rule := range rules {
		if j, ok := target[rule.Presented]; ok && rule.Presented != "" && j != i {
			allErrs = append(allErrs, field.Invalid(fldPath.Index(i).Child("presented"), rule.Presented,
				fmt.Sprintf("is the target group of rule %d: a group may be presented or target, not both (rules do not chain)", j)))
		}
	}
	return allErrs
}

func validateRewriteGroup(g string, fldPath *field.Path) field.ErrorList {
	if g == "" {
		return field.ErrorList{field.Required(fldPath, "the core group cannot be renamed")}
	}
	if len(g) > MaxRewriteGroupLength {
		return field.ErrorList{field.TooLong(fldPath, "", MaxRewriteGroupLength)}
	}
	var allErrs field.ErrorList
	for _, msg := range utilvalidation.IsDNS1123Subdomain(g) {
		allErrs = append(allErrs, field.Invalid(fldPath, g, msg))
	}
	if len(allErrs) == 0 {
		if why := reservedGroup(g); why != "" {
			allErrs = append(allErrs, field.Invalid(fldPath, g, "cannot be renamed: it "+why))
		}
	}
	return allErrs
}

func validatePrefixRewrites(rules []mounts.PrefixRewrite, fldPath *field.Path) field.ErrorList {
	if len(rules) > MaxRewriteRules {
		return field.ErrorList{field.TooMany(fldPath, len(rules), MaxRewriteRules)}
	}
	var allErrs field.ErrorList
	for i, rule := range rules {
		p := fldPath.Index(i)
		allErrs = append(allErrs, validateKeyPrefix(rule.Presented, p.Child("presented"))...)
		allErrs = append(allErrs, validateKeyPrefix(rule.Target, p.Child("target"))...)
		if rule.Presented != "" && rule.Presented == rule.Target {
			allErrs = append(allErrs, field.Invalid(p.Child("target"), rule.Target, "must differ from presented"))
		}
	}
	// Neither side may hold a prefix of another prefix of the same side (a key would match two
	// rules), nor a prefix of one on the other side (rules would chain).
	for i, a := range rules {
		for j, b := range rules {
			if i == j {
				continue
			}
			if a.Presented != "" && b.Presented != "" && strings.HasPrefix(b.Presented, a.Presented) && (i < j || a.Presented != b.Presented) {
				allErrs = append(allErrs, field.Invalid(fldPath.Index(j).Child("presented"), b.Presented, fmt.Sprintf("overlaps the presented prefix %q of rule %d", a.Presented, i)))
			}
			if a.Target != "" && b.Target != "" && strings.HasPrefix(b.Target, a.Target) && (i < j || a.Target != b.Target) {
				allErrs = append(allErrs, field.Invalid(fldPath.Index(j).Child("target"), b.Target, fmt.Sprintf("overlaps the target prefix %q of rule %d", a.Target, i)))
			}
			if a.Target != "" && b.Presented != "" && (strings.HasPrefix(b.Presented, a.Target) || strings.HasPrefix(a.Target, b.Presented)) {
				allErrs = append(allErrs, field.Invalid(fldPath.Index(j).Child("presented"), b.Presented, fmt.Sprintf("overlaps the target prefix %q of rule %d: a prefix may be presented or target, not both (rules do not chain)", a.Target, i)))
			}
		}
	}
	return allErrs
}

// validateKeyPrefix accepts the whole prefix of a qualified key: a DNS subdomain and "/", as
// in "kubevirt.io/". Renaming replaces it whole, so a renamed key's prefix is the other
// side's, which fits the 253 characters a key prefix may have.
func validateKeyPrefix(prefix string, fldPath *field.Path) field.ErrorList {
	if prefix == "" {
		return field.ErrorList{field.Required(fldPath, `a key prefix such as "example.com/"`)}
	}
	domain, ok := strings.CutSuffix(prefix, "/")
	if !ok {
		return field.ErrorList{field.Invalid(fldPath, prefix, `must be a DNS subdomain followed by "/", e.g. "example.com/"`)}
	}
	if len(domain) > utilvalidation.DNS1123SubdomainMaxLength {
		return field.ErrorList{field.TooLong(fldPath, "", utilvalidation.DNS1123SubdomainMaxLength+1)}
	}
	var allErrs field.ErrorList
	for _, msg := range utilvalidation.IsDNS1123Subdomain(domain) {
		allErrs = append(allErrs, field.Invalid(fldPath, prefix, msg))
	}
	if len(allErrs) == 0 {
		if why := reservedKeyPrefix(domain); why != "" {
			allErrs = append(allErrs, field.Invalid(fldPath, prefix, "cannot be renamed: it "+why))
		}
	}
	return allErrs
}
