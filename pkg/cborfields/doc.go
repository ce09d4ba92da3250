// Package cborfields is the CBOR serializer of the mounts.kcp.io API group: k8s.io/apimachinery's
// own, except that the managedFields of Mounts it encodes are turned from their JSON into CBOR
// once per distinct field set and remembered, rather than once per Mount and response. That
// conversion (metav1.FieldsV1.MarshalCBOR) was three quarters of encoding a LIST of Mounts in
// CBOR. The bytes written are the same as the upstream serializer's; decoding, watch streams
// and every other media type are untouched.
package cborfields
