package apiserver

import (
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"

	"github.com/kcp-dev/mount-apiserver/pkg/apis/mounts/install"
	"github.com/kcp-dev/mount-apiserver/pkg/registry/events"
)

var (
	// Scheme holds the internal and versioned mounts.kcp.io types and the meta types the
	// generic apiserver serves alongside them.
	Scheme = runtime.NewScheme()
	// Codecs encodes and decodes objects of Scheme.
	Codecs = serializer.NewCodecFactory(Scheme)
)

// CoreV1 is the core API group's version, of which the standalone server serves Secrets.
var CoreV1 = schema.GroupVersion{Group: "", Version: "v1"}

func init() {
	install.Install(Scheme)

	// Core v1 Secrets, served by the standalone server for the mounts that reference them.
	// There is no internal Secret type outside k8s.io/kubernetes: v1 is registered as the
	// internal version as well, and converting between the two only sets the kind.
	for _, gv := range []schema.GroupVersion{CoreV1, {Group: "", Version: runtime.APIVersionInternal}} {
		Scheme.AddKnownTypes(gv, &corev1.Secret{}, &corev1.SecretList{})
	}
	// Events of the standalone server's own objects (pkg/registry/events), the same way: one
	// store of core v1 Events, which events.k8s.io/v1 converts to and from in its storage.
	for _, gv := range []schema.GroupVersion{CoreV1, {Group: "", Version: runtime.APIVersionInternal}} {
		Scheme.AddKnownTypes(gv, &corev1.Event{}, &corev1.EventList{})
	}
	for _, gv := range []schema.GroupVersion{eventsv1.SchemeGroupVersion, {Group: eventsv1.GroupName, Version: runtime.APIVersionInternal}} {
		Scheme.AddKnownTypes(gv, &eventsv1.Event{}, &eventsv1.EventList{})
	}
	metav1.AddToGroupVersion(Scheme, eventsv1.SchemeGroupVersion)
	utilruntime.Must(Scheme.AddFieldLabelConversionFunc(CoreV1.WithKind("Event"), events.ConvertCoreFieldLabel))
	utilruntime.Must(Scheme.AddFieldLabelConversionFunc(eventsv1.SchemeGroupVersion.WithKind("Event"), events.ConvertEventsFieldLabel))
	// The self reviews (pkg/registry/selfreviews), the same way.
	for _, gv := range []schema.GroupVersion{authenticationv1.SchemeGroupVersion, {Group: authenticationv1.GroupName, Version: runtime.APIVersionInternal}} {
		Scheme.AddKnownTypes(gv, &authenticationv1.SelfSubjectReview{})
	}
	for _, gv := range []schema.GroupVersion{authorizationv1.SchemeGroupVersion, {Group: authorizationv1.GroupName, Version: runtime.APIVersionInternal}} {
		Scheme.AddKnownTypes(gv, &authorizationv1.SelfSubjectAccessReview{}, &authorizationv1.SelfSubjectRulesReview{})
	}
	metav1.AddToGroupVersion(Scheme, authenticationv1.SchemeGroupVersion)
	metav1.AddToGroupVersion(Scheme, authorizationv1.SchemeGroupVersion)

	// Options and status objects of the generic endpoints are served as meta/v1.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{},
		&metav1.APIVersions{},
		&metav1.APIGroupList{},
		&metav1.APIGroup{},
		&metav1.APIResourceList{},
	)
}

// ParameterCodec decodes query parameters into the options types of the scheme.
var ParameterCodec = runtime.NewParameterCodec(Scheme)
