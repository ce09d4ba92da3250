// Package v1alpha1 is the v1alpha1 version of the mounts.kcp.io API: the wire form of Mounts,
// with its defaults and its conversion to the internal types.
//
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/kcp-dev/mount-apiserver/pkg/apis/mounts
// +k8s:defaulter-gen=TypeMeta
// +k8s:openapi-gen=true
// +k8s:openapi-model-package=io.kcp.mounts.v1alpha1
// +groupName=mounts.kcp.io
package v1alpha1
