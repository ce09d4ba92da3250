// Package admissionrelay serves the admission relay of renaming mounts (spec.rewrites): the
// target's kube-apiserver calls webhooks that were registered through a renaming mount at the
// relay, which checks the call against what the mount registered, renames the AdmissionReview
// to presented names, forwards it to the webhook the caller registered, and renames the
// JSONPatch of its answer to target names. What the proxy writes into the target's webhook
// configurations is defined in package record, which both sides import.
package admissionrelay
