// Package install registers the mounts.kcp.io API group, internal and versioned, into a scheme.
package install
