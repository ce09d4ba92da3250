package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MountType says how a Mount reaches its target.
// +enum
type MountType string

const (
	// MountTypeURL proxies to a remote Kubernetes API server whose kubeconfig is in a Secret.
	MountTypeURL MountType = "URL"
	// MountTypeWorkspace proxies to another kcp workspace.
	MountTypeWorkspace MountType = "Workspace"
	// MountTypeRedirect answers with an HTTP redirect to another kcp workspace.
	MountTypeRedirect MountType = "Redirect"
)

// IdentityMode says under which identity proxied requests reach the target.
// +enum
type IdentityMode string

const (
	// IdentityModeImpersonate impersonates the caller (user, groups, extras, UID) on top of the
	// mount's credentials.
	IdentityModeImpersonate IdentityMode = "Impersonate"
	// IdentityModeMountCredentials uses the mount's credentials as they are. Admin-only.
	IdentityModeMountCredentials IdentityMode = "MountCredentials"
)

// MountPhase is the coarse state of a Mount.
// +enum
type MountPhase string

const (
	// MountPhaseInitializing: the mount was seen but not yet looked at.
	MountPhaseInitializing MountPhase = "Initializing"
	// MountPhaseConnecting: credentials are being resolved or the target has not answered yet.
	MountPhaseConnecting MountPhase = "Connecting"
	// MountPhaseReady: the target answered its health probe.
	MountPhaseReady MountPhase = "Ready"
	// MountPhaseUnknown: a mount that was Ready stopped answering.
	MountPhaseUnknown MountPhase = "Unknown"
)

// Condition types set on mounts.
const (
	// ConditionCredentialsResolved is True when the referenced credentials could be read.
	ConditionCredentialsResolved = "CredentialsResolved"
	// ConditionTargetReachable is True when the target answered its health probe.
	ConditionTargetReachable = "TargetReachable"
	// ConditionReady is True when requests through the mount can succeed.
	ConditionReady = "Ready"
	// ConditionAgentConnected is True while an agent holds a tunnel session for a tunnel
	// mount; its message names the replica and its lastTransitionTime says since when.
	ConditionAgentConnected = "AgentConnected"
)

// Well-known references.
const (
	// SecretKeyKubeconfig is the key of a referenced Secret that holds the target's kubeconfig.
	SecretKeyKubeconfig = "kubeconfig"
	// WorkspaceAPIVersion is the apiVersion of kcp Workspaces.
	WorkspaceAPIVersion = "tenancy.kcp.io/v1alpha1"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Mount makes a remote Kubernetes API, a cluster or a kcp workspace, reachable through this
// server at /apis/mounts.kcp.io/v1alpha1/mounts/<name>/proxy/.
type Mount struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the mount.
	// +optional
	Spec MountSpec `json:"spec,omitempty"`
	// status is the observed state of the mount, written by the server.
	// +optional
	Status MountStatus `json:"status,omitempty"`
}

// MountSpec is the desired state of a Mount.
type MountSpec struct {
	// type says how the mount reaches its target. URL proxies to a remote Kubernetes API server
	// whose kubeconfig is in the referenced Secret; Workspace proxies to the referenced kcp
	// workspace; Redirect answers with an HTTP redirect to the referenced kcp workspace.
	// +optional
	// +default="URL"
	Type MountType `json:"type,omitempty"`

	// ref names the object that backs the mount. For type URL: a Secret (apiVersion v1, kind
	// Secret, namespace, name) whose key "kubeconfig" holds the target's kubeconfig. For types
	// Workspace and Redirect: a kcp Workspace (apiVersion tenancy.kcp.io/v1alpha1, kind
	// Workspace) named by its logical cluster path, e.g. "root:org:team". apiVersion and kind
	// default from type. Empty for tunnel mounts with agent credentials, which lend no Secret.
	// +optional
	Ref ObjectReference `json:"ref"`

	// identity says under which identity proxied requests reach the target.
	// +optional
	Identity MountIdentity `json:"identity,omitempty"`

	// caBundle is a PEM bundle of CA certificates that replaces the one in the kubeconfig for
	// verifying the target's serving certificate. Only for type URL. TLS verification is never
	// turned off. In YAML and JSON it is base64 of the PEM text, like a Secret's data (e.g. the
	// output of `base64 -w0 ca.crt`), not the PEM text itself.
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`

	// timeouts bounds the time spent reaching the target. Unset fields take the server's
	// defaults.
	// +optional
	Timeouts *MountTimeouts `json:"timeouts,omitempty"`
	// tunnel says that the target is reached through a reverse tunnel that an agent
	// (mount-agent, next to the target) opens to this server through mounts/<name>/attach,
	// for targets this server cannot dial. Only for type URL.
	// +optional
	Tunnel *MountTunnel `json:"tunnel,omitempty"`
	// rewrites present the target's APIs under other names: API groups renamed one to one
	// (with an optional kind prefix) and metadata key prefixes renamed, in requests and
	// responses. Only for type URL.
	// +optional
	Rewrites *MountRewrites `json:"rewrites,omitempty"`
}

// TunnelCredentials says whose credentials reach a target through a tunnel.
// +enum
type TunnelCredentials string

const (
	// TunnelCredentialsServer: the server holds the target's kubeconfig (spec.ref) and speaks
	// TLS end to end through the tunnel; the agent only carries bytes to its one target.
	TunnelCredentialsServer TunnelCredentials = "Server"
	// TunnelCredentialsAgent: the agent authenticates to its cluster with its own credentials;
	// the server holds no credential of the target and sends only the caller's impersonation.
	TunnelCredentialsAgent TunnelCredentials = "Agent"
)

// MountTunnel says that the target is reached through an agent's reverse tunnel.
type MountTunnel struct {
	// credentials is Server (default): spec.ref names the target's kubeconfig Secret and TLS to
	// the target runs end to end through the tunnel; or Agent: the agent's own credentials
	// (its ServiceAccount) reach the target, spec.ref is empty, and every request impersonates
	// its caller.
	// +optional
	// +default="Server"
	Credentials TunnelCredentials `json:"credentials,omitempty"`
	// agentUser names the one user that may attach as this mount's agent, as the server
	// authenticates it (a ServiceAccount is system:serviceaccount:<namespace>:<name>). That
	// user needs no permission on mounts/attach, and no other user may attach. Unset: whoever
	// has verb "create" on mounts/attach for this mount's name may. Naming the agent spares a
	// fleet one RBAC binding per agent, which the host's authorizer walks on every request.
	// Setting or changing it is authorized like creating the mount.
	// +optional
	AgentUser string `json:"agentUser,omitempty"`
}

// MountRewrites renames a target's APIs as the mount presents them.
type MountRewrites struct {
	// groups renames API groups one to one: requests name the presented group and reach the
	// target in the target group; responses come back in the presented group.
	// +optional
	// +listType=map
	// +listMapKey=presented
	Groups []GroupRewrite `json:"groups,omitempty"`
	// metadataKeyPrefixes renames the prefixes of label, annotation and finalizer keys.
	// +optional
	// +listType=map
	// +listMapKey=presented
	MetadataKeyPrefixes []PrefixRewrite `json:"metadataKeyPrefixes,omitempty"`
}

// GroupRewrite presents the target's API group as another group.
type GroupRewrite struct {
	// presented is the API group that clients of the mount see, e.g. "kubevirt.io".
	Presented string `json:"presented"`
	// target is the API group stored in the target, e.g. "x.virtualization.deckhouse.io".
	Target string `json:"target"`
	// kindPrefix is put before every kind of the group in the target, e.g. "Prefixed" stores
	// VirtualMachine as PrefixedVirtualMachine; resource, singular and short names and the list
	// kind follow it in lower case.
	// +optional
	KindPrefix string `json:"kindPrefix,omitempty"`
}

// PrefixRewrite presents metadata keys that start with target as starting with presented.
type PrefixRewrite struct {
	// presented is the key prefix clients see, e.g. "kubevirt.io/".
	Presented string `json:"presented"`
	// target is the key prefix stored in the target, e.g. "x.virtualization.deckhouse.io/".
	Target string `json:"target"`
}

// ObjectReference names the object that backs a Mount. It is granular, not atomic, for
// server-side apply: apiVersion and kind are defaulted, and an atomic reference would make
// every applier that leaves them out conflict with the defaulted value.
type ObjectReference struct {
	// apiVersion of the referenced object: "v1" for Secrets, "tenancy.kcp.io/v1alpha1" for
	// Workspaces. Defaults from the mount's type.
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// kind of the referenced object: "Secret" for type URL, "Workspace" for types Workspace and
	// Redirect. Defaults from the mount's type.
	// +optional
	Kind string `json:"kind,omitempty"`
	// namespace of the referenced Secret. Required for Secrets, forbidden for Workspaces.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// name of the referenced Secret, or the logical cluster path of the referenced Workspace.
	Name string `json:"name"`
}

// MountIdentity says how the caller's identity is carried to the target.
type MountIdentity struct {
	// mode is Impersonate (default): the caller reaches the target under its own user, groups,
	// extras and UID, impersonated with the mount's credentials; or MountCredentials: every
	// caller acts with the mount's credentials as they are, which only an administrator should
	// allow. Callers in system:masters are never impersonated.
	// +optional
	// +default="Impersonate"
	Mode IdentityMode `json:"mode,omitempty"`
	// userPrefix is put before the caller's user name when impersonating, e.g. "hub:".
	// Only with mode Impersonate. May not start with "system:".
	// +optional
	UserPrefix string `json:"userPrefix,omitempty"`
	// groupPrefix is put before each of the caller's groups when impersonating, e.g. "hub:".
	// Only with mode Impersonate. May not start with "system:".
	// +optional
	GroupPrefix string `json:"groupPrefix,omitempty"`
}

// MountTimeouts bounds the time spent reaching the target.
type MountTimeouts struct {
	// connectSeconds bounds dialing the target plus the TLS handshake, from 1 to 300.
	// +optional
	ConnectSeconds *int32 `json:"connectSeconds,omitempty"`
	// requestSeconds bounds a proxied request that is not long-running (watch, log follow,
	// exec, attach, port-forward and nested proxies are exempt), from 1 to 3600.
	// +optional
	RequestSeconds *int32 `json:"requestSeconds,omitempty"`
}

// MountStatus is the observed state of a Mount.
type MountStatus struct {
	// phase is Initializing when the mount was first seen, Connecting while credentials resolve
	// and the target has not answered, Ready when the target answers, Unknown when a Ready
	// mount stopped answering.
	// +optional
	Phase MountPhase `json:"phase,omitempty"`
	// conditions say why the mount is in its phase (CredentialsResolved, TargetReachable, Ready).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// URL is the URL at which the mount's proxy is served. kcp reads this field.
	// +optional
	URL string `json:"URL,omitempty"`
	// observedGeneration is the generation of the spec that this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MountList is a list of Mounts.
type MountList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`

	// items are the mounts.
	Items []Mount `json:"items"`
}

// +k8s:conversion-gen:explicit-from=net/url.Values
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MountProxyOptions are the query options of the mounts/proxy subresource.
type MountProxyOptions struct {
	metav1.TypeMeta `json:",inline"`

	// path is the path below the target's base path to forward the request to.
	// +optional
	Path string `json:"path,omitempty"`
}
