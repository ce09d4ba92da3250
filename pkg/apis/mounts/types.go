package mounts

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// MountType says how a Mount reaches its target.
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
type IdentityMode string

const (
	// IdentityModeImpersonate impersonates the caller (user, groups, extras, UID) on top of the
	// mount's credentials.
	IdentityModeImpersonate IdentityMode = "Impersonate"
	// IdentityModeMountCredentials uses the mount's credentials as they are. Admin-only.
	IdentityModeMountCredentials IdentityMode = "MountCredentials"
)

// MountPhase is the coarse state of a Mount.
type MountPhase string

const (
	MountPhaseInitializing MountPhase = "Initializing"
	MountPhaseConnecting   MountPhase = "Connecting"
	MountPhaseReady        MountPhase = "Ready"
	MountPhaseUnknown      MountPhase = "Unknown"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Mount makes a remote Kubernetes API reachable through this server.
type Mount struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   MountSpec
	Status MountStatus
}

// MountSpec is the desired state of a Mount.
type MountSpec struct {
	Type     MountType
	Ref      ObjectReference
	Identity MountIdentity
	CABundle []byte
	Timeouts *MountTimeouts
	Tunnel   *MountTunnel
	Rewrites *MountRewrites
}

// TunnelCredentials says whose credentials reach a target through a tunnel.
type TunnelCredentials string

const (
	// TunnelCredentialsServer: the server holds the target's kubeconfig (spec.ref) and speaks
	// TLS end to end through the tunnel; the agent only carries bytes.
	TunnelCredentialsServer TunnelCredentials = "Server"
	// TunnelCredentialsAgent: the agent authenticates to its cluster with its own credentials;
	// the server holds none and sends only the caller's impersonation.
	TunnelCredentialsAgent TunnelCredentials = "Agent"
)

// MountTunnel says that the target is reached through an agent's reverse tunnel.
type MountTunnel struct {
	Credentials TunnelCredentials
	AgentUser   string
}

// MountRewrites renames a target's APIs as the mount presents them.
type MountRewrites struct {
	Groups              []GroupRewrite
	MetadataKeyPrefixes []PrefixRewrite
}

// GroupRewrite presents the target's API group Target as Presented, one to one.
type GroupRewrite struct {
	Presented  string
	Target     string
	KindPrefix string
}

// PrefixRewrite presents metadata keys (labels, annotations, finalizers) starting with Target
// as starting with Presented.
type PrefixRewrite struct {
	Presented string
	Target    string
}

// ObjectReference names the object that backs a Mount: a Secret for URL mounts, a kcp
// Workspace for Workspace and Redirect mounts.
type ObjectReference struct {
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
}

// MountIdentity says how the caller's identity is carried to the target.
type MountIdentity struct {
	Mode        IdentityMode
	UserPrefix  string
	GroupPrefix string
}

// MountTimeouts bounds the time spent reaching the target.
type MountTimeouts struct {
	ConnectSeconds *int32
	RequestSeconds *int32
}

// MountStatus is the observed state of a Mount.
type MountStatus struct {
	Phase              MountPhase
	Conditions         []metav1.Condition
	URL                string
	ObservedGeneration int64
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MountList is a list of Mounts.
type MountList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []Mount
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MountProxyOptions are the options of the mounts/proxy subresource.
type MountProxyOptions struct {
	metav1.TypeMeta

	// Path is the path below the target's base path to forward the request to.
	Path string
}
