// Package mounts is the REST storage of the mounts resource and its subresources: the
// genericregistry.Store over etcd3, the create/update/status strategies, the table convertor
// and the etcd key layout shared with the later kcp (cluster-aware) mode.
package mounts
