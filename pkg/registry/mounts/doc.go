// Package mounts is the REST storage of the mounts resource and its subresources: the
// genericregistry.Store over etcd3, the create/update/status strategies, the table convertor,
// the etcd key layout shared with the later kcp (cluster-aware) mode, and later pages of
// paginated LISTs served from the watch cache while it holds their state (paging.go).
package mounts
