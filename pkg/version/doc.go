// Package version is the version of mount-apiserver and mount-agent: the project's own (set at
// link time, or taken from the Go build information), and the Kubernetes-compatible version the
// server reports at /version (the Kubernetes version it builds on, with the project's version
// as build metadata, as kcp does).
package version
