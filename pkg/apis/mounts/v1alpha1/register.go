package v1alpha1

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of Mounts.
const GroupName = "mounts.kcp.io"

// SchemeGroupVersion is the group and version of this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// Resource qualifies a resource name with the group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	localSchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes, addDefaultingFuncs, addFieldLabelConversionFuncs)
	// SchemeBuilder collects the functions that register this version.
	SchemeBuilder = &localSchemeBuilder
	// AddToScheme registers this version into a scheme.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&Mount{},
		&MountList{},
		&MountProxyOptions{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}

// Field selectors supported on mounts, besides metadata.name.
const (
	FieldSpecType    = "spec.type"
	FieldStatusPhase = "status.phase"
)

func addFieldLabelConversionFuncs(scheme *runtime.Scheme) error {
	return scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("Mount"),
		func(label, value string) (string, string, error) {
			switch label {
			case "metadata.name", FieldSpecType, FieldStatusPhase:
				return label, value, nil
			default:
				return "", "", fmt.Errorf("field label not supported: %s (supported: metadata.name, %s, %s)", label, FieldSpecType, FieldStatusPhase)
			}
		})
}
