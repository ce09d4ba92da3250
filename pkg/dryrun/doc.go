// Package dryrun carries a caller's dryRun query parameter through mounts/<name>/proxy to the
// mount's target. k8s.io/apiserver's connect handler refuses dryRun on every CONNECT
// subresource ("dryRun is not supported", kubernetes#66083), so server-side dry run and
// kubectl diff would fail through every mount. The server renames the parameter before that
// handler (Escape) and the proxy names it back (Restore), byte for byte otherwise.
package dryrun
