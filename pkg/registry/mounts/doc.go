// Package mounts is the REST storage of the mounts resource and its subresources: the
// genericregistry.Store over etcd3, the create/update/status strategies, the table convertor,
// the etcd key layout shared with the later kcp (cluster-aware) mode, and how mounts/proxy
// and mounts/attach read a Mount that is never older than an acknowledged write (fence.go).
package mounts
