// Package kcp holds what kcp mode adds to the server: cluster-aware paths
// (/clusters/<logical-cluster>/... as kcp's APIExport virtual storage forwards them, and
// /clusters/*/... for list and watch across clusters) and the kcp.io/cluster annotation that
// says which logical cluster an object belongs to.
package kcp
