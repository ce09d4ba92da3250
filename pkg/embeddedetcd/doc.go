// Package embeddedetcd runs an etcd server inside mount-apiserver for standalone use, with its
// data in a directory that survives restarts and its listeners on loopback only.
package embeddedetcd
