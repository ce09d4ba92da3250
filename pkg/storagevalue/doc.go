// Package storagevalue compresses the values mount-apiserver writes to etcd. A Mount's JSON is
// mostly field names and managedFields, which compress to about half; etcd's memory-mapped
// database, its raft log and the bytes it sends on every watch event shrink with it.
package storagevalue
