package targetpolicy

import (
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kcp-dev/mount-apiserver/pkg/yamlbound"
)

// maxKubeconfigJSON bounds what a kubeconfig stands for once its YAML aliases are expanded:
// twice the largest kubeconfig the proxy uses.
const maxKubeconfigJSON = 1 << 20

// ValidateServer checks a kubeconfig's server URL as far as it is known without resolving
// names, for admission: a refusal is a Forbidden error at fldPath (e.g. spec.ref, the
// reference to the Secret that holds the kubeconfig). Transports check again when they are
// built and on every connection.
func (p *Policy) ValidateServer(fldPath *field.Path, server string) field.ErrorList {
	if err := p.CheckServer(server); err != nil {
		return field.ErrorList{field.Forbidden(fldPath, err.Error())}
	}
	return nil
}

// ValidateKubeconfig checks the server of a kubeconfig's current context with
// ValidateServer. A kubeconfig without one is Invalid at fldPath; its bytes are never quoted.
func (p *Policy) ValidateKubeconfig(fldPath *field.Path, kubeconfig []byte) field.ErrorList {
	// clientcmd converts the whole file to JSON: YAML aliases could make that gigabytes.
	if err := yamlbound.Check(kubeconfig, maxKubeconfigJSON); err != nil {
		return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, "the referenced kubeconfig's "+err.Error())}
	}
	kc, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, "the referenced kubeconfig does not parse")}
	}
	ctx, ok := kc.Contexts[kc.CurrentContext]
	if !ok {
		return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, "the referenced kubeconfig has no current context")}
	}
	cluster, ok := kc.Clusters[ctx.Cluster]
	if !ok {
		return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, "the referenced kubeconfig's current context names no cluster it has")}
	}
	return p.ValidateServer(fldPath, cluster.Server)
}
