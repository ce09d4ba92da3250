// Package admissionrelay is the admission relay of renaming mounts (spec.rewrites), both
// sides of it:
//   - what a renaming mount writes into the target's webhook configurations (register.go):
//     every webhook's clientConfig points at the relay, the caller's own clientConfig goes into
//     a relay record annotation, and reads through the mount show the configuration as
//     written. The proxy calls it with bytes; it does no HTTP of its own there.
//   - the relay itself (relay.go): the target's kube-apiserver calls the webhooks at the relay,
//     which checks the call against what the mount registered, renames the AdmissionReview to
//     presented names, forwards it to the webhook the caller registered (at that URL only:
//     no redirect is followed), and renames the JSONPatch of its answer to target names.
//
// It reaches targets and webhooks through the Targets interface, which the proxy implements:
// the proxy depends on this package, never the other way round. The wire format both sides
// share (the record, relay paths) is package record.
package admissionrelay
