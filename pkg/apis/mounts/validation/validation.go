package validation

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// Limits of the numeric and string fields.
const (
	MaxConnectSeconds = 300
	MaxRequestSeconds = 3600
	MaxPrefixLength   = 63
	MaxCABundleBytes  = 256 * 1024
	MaxURLLength      = 2048
	// MaxAgentUserLength bounds spec.tunnel.agentUser; ServiceAccounts' names are at most
	// 23 + 2*253 long.
	MaxAgentUserLength = 1024
)

// Referenced kinds and apiVersions.
const (
	secretKind          = "Secret"
	secretAPIVersion    = "v1"
	workspaceKind       = "Workspace"
	workspaceAPIVersion = "tenancy.kcp.io/v1alpha1"
)

var (
	supportedTypes             = sets.New(mounts.MountTypeURL, mounts.MountTypeWorkspace, mounts.MountTypeRedirect)
	supportedModes             = sets.New(mounts.IdentityModeImpersonate, mounts.IdentityModeMountCredentials)
	supportedTunnelCredentials = sets.New(mounts.TunnelCredentialsServer, mounts.TunnelCredentialsAgent)
	supportedPhase             = sets.New(mounts.MountPhaseInitializing, mounts.MountPhaseConnecting, mounts.MountPhaseReady, mounts.MountPhaseUnknown)

	// workspacePathRE matches a kcp logical cluster path: lower-case DNS-label-like segments
	// separated by colons, e.g. "root:org:team" or a logical cluster name such as "2x7kq3n1".
	workspacePathRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(:[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// ValidateMountName accepts DNS subdomains, the names that are safe as one URL path segment of
// mounts/<name>/proxy.
var ValidateMountName = apimachineryvalidation.NameIsDNSSubdomain

// ValidateMount validates a Mount on create.
func ValidateMount(m *mounts.Mount) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&m.ObjectMeta, false, ValidateMountName, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateMountSpec(&m.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidateMountUpdate validates a Mount on update of the main resource. The whole spec is
// validated again: every field may change, but the result must be a valid Mount.
func ValidateMountUpdate(newM, oldM *mounts.Mount) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newM.ObjectMeta, &oldM.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateMountSpec(&newM.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidateMountStatusUpdate validates a Mount on update of the status subresource.
func ValidateMountStatusUpdate(newM, oldM *mounts.Mount) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newM.ObjectMeta, &oldM.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateMountStatus(&newM.Status, field.NewPath("status"))...)
	return allErrs
}

// ValidateMountSpec validates a MountSpec, after defaulting.
func ValidateMountSpec(spec *mounts.MountSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList

	typePath := fldPath.Child("type")
	switch {
	case spec.Type == "":
		allErrs = append(allErrs, field.Required(typePath, ""))
	case !supportedTypes.Has(spec.Type):
		allErrs = append(allErrs, field.NotSupported(typePath, spec.Type, sets.List(supportedTypes)))
	}

	agentCredentials := spec.Type == mounts.MountTypeURL && spec.Tunnel != nil && spec.Tunnel.Credentials == mounts.TunnelCredentialsAgent
	if agentCredentials {
		// The server holds no credential of the target: nothing to reference.
		if spec.Ref != (mounts.ObjectReference{}) {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child("ref"), "must be empty with spec.tunnel.credentials Agent: the agent's own credentials reach the target"))
		}
	} else {
		allErrs = append(allErrs, validateRef(spec.Type, &spec.Ref, fldPath.Child("ref"))...)
	}
	allErrs = append(allErrs, validateIdentity(&spec.Identity, fldPath.Child("identity"))...)
	if spec.Tunnel != nil {
		allErrs = append(allErrs, validateTunnel(spec, fldPath)...)
	}

	if len(spec.CABundle) > 0 {
		caPath := fldPath.Child("caBundle")
		switch {
		case spec.Type != mounts.MountTypeURL:
			allErrs = append(allErrs, field.Forbidden(caPath, "only allowed for type URL"))
		case agentCredentials:
			allErrs = append(allErrs, field.Forbidden(caPath, "not allowed with spec.tunnel.credentials Agent: the agent verifies its target, the server speaks plain HTTP inside the agent's TLS session"))
		default:
			allErrs = append(allErrs, validateCABundle(spec.CABundle, caPath)...)
		}
	}

	allErrs = append(allErrs, validateRewrites(spec.Type, spec.Rewrites, fldPath.Child("rewrites"))...)

	if t := spec.Timeouts; t != nil {
		timeoutsPath := fldPath.Child("timeouts")
		allErrs = append(allErrs, validateSeconds(t.ConnectSeconds, MaxConnectSeconds, timeoutsPath.Child("connectSeconds"))...)
		allErrs = append(allErrs, validateSeconds(t.RequestSeconds, MaxRequestSeconds, timeoutsPath.Child("requestSeconds"))...)
	}
	return allErrs
}

// validateTunnel checks spec.tunnel, which spec has.
func validateTunnel(spec *mounts.MountSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	tunnelPath := fldPath.Child("tunnel")
	if spec.Type != mounts.MountTypeURL {
		// The type error (if any) says the rest; a tunnel reaches one cluster's API server.
		return append(allErrs, field.Forbidden(tunnelPath, "only allowed for type URL"))
	}
	credsPath := tunnelPath.Child("credentials")
	switch c := spec.Tunnel.Credentials; c {
	case "":
		allErrs = append(allErrs, field.Required(credsPath, ""))
	case mounts.TunnelCredentialsServer:
	case mounts.TunnelCredentialsAgent:
		// The agent's credentials are its own: lending them bare to every caller would make
		// each caller the agent's ServiceAccount on the target.
		if spec.Identity.Mode != mounts.IdentityModeImpersonate && spec.Identity.Mode != "" {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("identity", "mode"), spec.Identity.Mode,
				fmt.Sprintf("must be %s with spec.tunnel.credentials Agent: the agent acts only for the callers it is told to impersonate", mounts.IdentityModeImpersonate)))
		}
	default:
		allErrs = append(allErrs, field.NotSupported(credsPath, c, sets.List(supportedTunnelCredentials)))
	}
	return append(allErrs, validateAgentUser(spec.Tunnel.AgentUser, tunnelPath.Child("agentUser"))...)
}

// validateAgentUser checks a user name that may attach as a mount's agent.
func validateAgentUser(name string, fldPath *field.Path) field.ErrorList {
	switch {
	case name == "":
		return nil
	case len(name) > MaxAgentUserLength:
		return field.ErrorList{field.TooLong(fldPath, "", MaxAgentUserLength)}
	case name == user.Anonymous:
		// Whoever sends no credentials would carry the mount's traffic.
		return field.ErrorList{field.Invalid(fldPath, name, "must name an authenticated user, not the anonymous one")}
	case strings.TrimSpace(name) != name || strings.IndexFunc(name, unicode.IsControl) >= 0:
		return field.ErrorList{field.Invalid(fldPath, name, "must be a user name as authenticated: no surrounding spaces or control characters")}
	}
	return nil
}

func validateRef(t mounts.MountType, ref *mounts.ObjectReference, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	var wantKind, wantAPIVersion string
	switch t {
	case mounts.MountTypeURL:
		wantKind, wantAPIVersion = secretKind, secretAPIVersion
	case mounts.MountTypeWorkspace, mounts.MountTypeRedirect:
		wantKind, wantAPIVersion = workspaceKind, workspaceAPIVersion
	default:
		// The type error says it all; the reference cannot be judged without a type.
		return nil
	}

	// The apiVersion is judged only with the right kind: it defaults from the kind, so after a
	// wrong kind it is missing (or belongs to that kind), and one mistake would show as two.
	switch {
	case ref.Kind == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("kind"), fmt.Sprintf("must be %q for type %s", wantKind, t)))
	case ref.Kind != wantKind:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("kind"), ref.Kind, []string{wantKind}))
	case ref.APIVersion == "":
		allErrs = append(allErrs, field.Required(fldPath.Child("apiVersion"), fmt.Sprintf("must be %q for type %s", wantAPIVersion, t)))
	case ref.APIVersion != wantAPIVersion:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("apiVersion"), ref.APIVersion, []string{wantAPIVersion}))
	}

	namePath, nsPath := fldPath.Child("name"), fldPath.Child("namespace")
	switch wantKind {
	case secretKind:
		if ref.Namespace == "" {
			allErrs = append(allErrs, field.Required(nsPath, "the namespace of the Secret"))
		} else {
			for _, msg := range apimachineryvalidation.ValidateNamespaceName(ref.Namespace, false) {
				allErrs = append(allErrs, field.Invalid(nsPath, ref.Namespace, msg))
			}
		}
		if ref.Name == "" {
			allErrs = append(allErrs, field.Required(namePath, "the name of the Secret"))
		} else {
			for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(ref.Name, false) {
				allErrs = append(allErrs, field.Invalid(namePath, ref.Name, msg))
			}
		}
	case workspaceKind:
		if ref.Namespace != "" {
			allErrs = append(allErrs, field.Forbidden(nsPath, "Workspaces are not namespaced"))
		}
		switch {
		case ref.Name == "":
			allErrs = append(allErrs, field.Required(namePath, `the logical cluster path of the Workspace, e.g. "root:org:team"`))
		case len(ref.Name) > utilvalidation.DNS1123SubdomainMaxLength*4:
			allErrs = append(allErrs, field.TooLong(namePath, "", utilvalidation.DNS1123SubdomainMaxLength*4))
		case !workspacePathRE.MatchString(ref.Name):
			allErrs = append(allErrs, field.Invalid(namePath, ref.Name, `must be a logical cluster path: lower-case alphanumeric segments, '-' inside, separated by ':', e.g. "root:org:team"`))
		}
	}
	return allErrs
}

func validateIdentity(id *mounts.MountIdentity, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	modePath := fldPath.Child("mode")
	switch {
	case id.Mode == "":
		allErrs = append(allErrs, field.Required(modePath, ""))
	case !supportedModes.Has(id.Mode):
		allErrs = append(allErrs, field.NotSupported(modePath, id.Mode, sets.List(supportedModes)))
	}
	for _, p := range []struct {
		value string
		path  *field.Path
	}{{id.UserPrefix, fldPath.Child("userPrefix")}, {id.GroupPrefix, fldPath.Child("groupPrefix")}} {
		if p.value == "" {
			continue
		}
		if id.Mode != mounts.IdentityModeImpersonate {
			allErrs = append(allErrs, field.Forbidden(p.path, "only allowed with mode Impersonate"))
			continue
		}
		allErrs = append(allErrs, validatePrefix(p.value, p.path)...)
	}
	return allErrs
}

// validatePrefix keeps prefixed identities out of the reserved system: namespace, where a
// prefix could turn an ordinary group into system:masters or a user into a system component.
func validatePrefix(prefix string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if len(prefix) > MaxPrefixLength {
		allErrs = append(allErrs, field.TooLong(fldPath, "", MaxPrefixLength))
	}
	if strings.HasPrefix(prefix, "system:") || strings.HasPrefix("system:", prefix) {
		allErrs = append(allErrs, field.Invalid(fldPath, prefix, `must not start with "system:" or a part of it`))
	}
	for _, r := range prefix {
		if r < 0x21 || r > 0x7e {
			allErrs = append(allErrs, field.Invalid(fldPath, prefix, "must consist of printable ASCII characters without spaces"))
			break
		}
	}
	return allErrs
}

func validateCABundle(bundle []byte, fldPath *field.Path) field.ErrorList {
	if len(bundle) > MaxCABundleBytes {
		return field.ErrorList{field.TooLong(fldPath, "", MaxCABundleBytes)}
	}
	certs := 0
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, fmt.Sprintf("must contain only PEM CERTIFICATE blocks, found %q", block.Type))}
		}
		if _, err := x509.ParseCertificate(block.Bytes); err != nil {
			return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, fmt.Sprintf("certificate %d does not parse: %v", certs+1, err))}
		}
		certs++
	}
	if certs == 0 {
		return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, "must contain at least one PEM-encoded CA certificate")}
	}
	return nil
}

func validateSeconds(v *int32, limit int32, fldPath *field.Path) field.ErrorList {
	if v == nil || (*v >= 1 && *v <= limit) {
		return nil
	}
	return field.ErrorList{field.Invalid(fldPath, *v, fmt.Sprintf("must be between 1 and %d", limit))}
}

// ValidateMountStatus validates a MountStatus.
func ValidateMountStatus(status *mounts.MountStatus, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if status.Phase != "" && !supportedPhase.Has(status.Phase) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("phase"), status.Phase, sets.List(supportedPhase)))
	}
	allErrs = append(allErrs, metav1validation.ValidateConditions(status.Conditions, fldPath.Child("conditions"))...)
	if status.URL != "" {
		allErrs = append(allErrs, validateStatusURL(status.URL, fldPath.Child("URL"))...)
	}
	allErrs = append(allErrs, apimachineryvalidation.ValidateNonnegativeField(status.ObservedGeneration, fldPath.Child("observedGeneration"))...)
	return allErrs
}

// validateStatusURL accepts absolute http(s) URLs without credentials, query or fragment:
// kcp routes to this URL and joins paths onto it.
func validateStatusURL(raw string, fldPath *field.Path) field.ErrorList {
	if len(raw) > MaxURLLength {
		return field.ErrorList{field.TooLong(fldPath, "", MaxURLLength)}
	}
	u, err := url.Parse(raw)
	if err != nil {
		return field.ErrorList{field.Invalid(fldPath, raw, "must be an absolute http or https URL")}
	}
	var allErrs field.ErrorList
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		allErrs = append(allErrs, field.Invalid(fldPath, raw, "must be an absolute http or https URL"))
	case u.Host == "":
		allErrs = append(allErrs, field.Invalid(fldPath, raw, "must have a host"))
	}
	if u.User != nil {
		// Do not echo the value: it holds credentials.
		allErrs = append(allErrs, field.Invalid(fldPath, field.OmitValueType{}, "must not contain user information"))
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		allErrs = append(allErrs, field.Invalid(fldPath, raw, "must not have a query or fragment"))
	}
	return allErrs
}
