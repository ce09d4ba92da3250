// Package clusters carries the logical cluster of a request through its context. Outside kcp
// mode every request belongs to DefaultCluster; kcp mode will set the cluster from the
// /clusters/<name> path, and storage keys already include it so no data moves then.
package clusters
