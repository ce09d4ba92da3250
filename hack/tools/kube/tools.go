//go:build tools

// Package tools pins the real Kubernetes and etcd binaries that
// hack/kube-binaries.sh builds for integration tests. The blank imports keep
// `go mod tidy` from dropping the requirements; the packages are main
// packages and are only ever built with `go build`, never imported.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"            // etcd (package main at the module root)
	_ "k8s.io/kubernetes/cmd/kube-apiserver" // kube-apiserver
	_ "k8s.io/kubernetes/cmd/kubectl"        // kubectl
)
