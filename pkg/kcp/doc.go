// Package kcp holds what kcp mode adds to the server: cluster-aware paths
// (/clusters/<logical-cluster>/... as kcp's APIExport virtual storage forwards them, and
// /clusters/*/... for list and watch across clusters) and the path prefix of a front-proxy
// mapping; the kcp.io/cluster annotation that says which logical cluster an object belongs
// to; who is calling (the shard's client certificate with or without X-Remote-*, the
// front-proxy's requestheader certificate) and what they may do (what kcp authorized, or kcp's
// RBAC through access reviews in the logical cluster); clients per logical cluster; and what
// the server reads of kcp itself: workspace paths (root:org:team) for Workspace and Redirect
// mounts, and the APIExport's bindings.
package kcp
