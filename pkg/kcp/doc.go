// Package kcp holds what kcp mode adds to the server: cluster-aware paths
// (/clusters/<logical-cluster>/... as kcp's APIExport virtual storage forwards them, and
// /clusters/*/... for list and watch across clusters), the kcp.io/cluster annotation that
// says which logical cluster an object belongs to, and the resolution of workspace paths
// (root:org:team) through kcp for Workspace and Redirect mounts.
package kcp
