// Package mounts holds the internal (hub) types of the mounts.kcp.io API group.
// Storage and validation work on these; clients only ever see a versioned form.
//
// +k8s:deepcopy-gen=package
// +groupName=mounts.kcp.io
package mounts
