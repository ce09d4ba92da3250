package fuzzer

import (
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/randfill"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts"
)

// Funcs returns the fuzzer functions of the mounts.kcp.io group. Decoding applies defaults, so
// the fuzzed internal objects must already be in their defaulted form to round-trip.
func Funcs(_ runtimeserializer.CodecFactory) []interface{} {
	return []interface{}{
		func(s *mounts.MountSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			if s.Type == "" {
				s.Type = []mounts.MountType{mounts.MountTypeURL, mounts.MountTypeWorkspace, mounts.MountTypeRedirect}[c.Intn(3)]
			}
			if s.Identity.Mode == "" {
				s.Identity.Mode = mounts.IdentityModeImpersonate
			}
			if s.Tunnel != nil && s.Tunnel.Credentials == "" {
				s.Tunnel.Credentials = mounts.TunnelCredentialsServer
			}
			switch s.Type {
			case mounts.MountTypeURL:
				if s.Ref.Kind == "" {
					s.Ref.Kind = "Secret"
				}
				if s.Ref.Kind == "Secret" && s.Ref.APIVersion == "" {
					s.Ref.APIVersion = "v1"
				}
			case mounts.MountTypeWorkspace, mounts.MountTypeRedirect:
				if s.Ref.Kind == "" {
					s.Ref.Kind = "Workspace"
				}
				if s.Ref.Kind == "Workspace" && s.Ref.APIVersion == "" {
					s.Ref.APIVersion = "tenancy.kcp.io/v1alpha1"
				}
			}
		},
	}
}
