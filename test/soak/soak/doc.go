// Package soak holds a steady proxy load on real servers (a host kube-apiserver with
// mount-apiserver aggregated into it, a remote kube-apiserver behind a Mount) and measures
// what the server holds before, during and after it: the load of issue #16, shared by the
// soak command (test/soak) and its short run in the integration tests (TestSoak10s).
package soak
