// Package framework starts real mount-apiservers for integration tests: in-process with the
// command's own options, or as the built binary, each on a free 127.0.0.1 port with a temporary
// root directory, and stops them with t.Cleanup.
package framework
