// Package proxy forwards requests of the mounts/<name>/proxy subresource to a Mount's target:
// it resolves the target's credentials, reaches only targets the target policy allows
// (checked when a transport is built, on every dial and in every TLS handshake), keeps one
// transport per Mount, carries the caller's identity by impersonation, keeps paths under the
// target's base path, passes upgrades (exec, attach, port-forward) through, and answers
// failures with metav1.Status.
package proxy
