// Package secrets is the REST storage of core v1 Secrets that the standalone server serves
// itself, so that the kubeconfigs URL mounts reference can live next to the mounts with no
// second cluster: kubectl create secret works against the server as against any cluster. The
// validation follows Kubernetes' own for Secrets (names, keys, 1 MiB, immutability).
package secrets
