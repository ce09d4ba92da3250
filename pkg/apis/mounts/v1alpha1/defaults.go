package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime"
)

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}

// SetDefaults_MountSpec defaults the type to URL, the identity mode to Impersonate, and the
// reference's apiVersion and kind from the type, so users only name what is theirs to name.
// A tunnel with the agent's credentials references nothing: its reference stays empty.
func SetDefaults_MountSpec(obj *MountSpec) {
	if obj.Type == "" {
		obj.Type = MountTypeURL
	}
	if obj.Identity.Mode == "" {
		obj.Identity.Mode = IdentityModeImpersonate
	}
	switch obj.Type {
	case MountTypeURL:
		if obj.Tunnel != nil && obj.Tunnel.Credentials == TunnelCredentialsAgent {
			break
		}
		if obj.Ref.Kind == "" {
			obj.Ref.Kind = "Secret"
		}
		if obj.Ref.Kind == "Secret" && obj.Ref.APIVersion == "" {
			obj.Ref.APIVersion = "v1"
		}
	case MountTypeWorkspace, MountTypeRedirect:
		if obj.Ref.Kind == "" {
			obj.Ref.Kind = "Workspace"
		}
		if obj.Ref.Kind == "Workspace" && obj.Ref.APIVersion == "" {
			obj.Ref.APIVersion = WorkspaceAPIVersion
		}
	}
}
