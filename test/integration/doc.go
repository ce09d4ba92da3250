// Package integration tests mount-apiserver end to end: real servers on loopback with real
// etcd, driven by the generated clientset and the real kubectl.
package integration
