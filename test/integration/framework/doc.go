// Package framework starts real mount-apiservers for integration tests: in-process with the
// command's own options, or as the built binary, each on a free 127.0.0.1 port with a temporary
// root directory, and stops them with t.Cleanup. It also runs real kube-apiservers (with a
// minimal kubelet) on the host or inside a network namespace of the test's own (netns.go).
package framework
