// Package version is the version mount-apiserver reports at /version: set at link time, or
// taken from the Go build information.
package version
