// Package apiserver assembles the mount-apiserver: the scheme and codecs of mounts.kcp.io,
// the generic apiserver configuration, the API group with its REST storage, and the lifetime
// of the embedded etcd next to it.
package apiserver
