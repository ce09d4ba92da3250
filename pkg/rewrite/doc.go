// Package rewrite renames a target's APIs as a renaming Mount presents them (spec.rewrites):
// API groups one to one with an optional kind prefix, and prefixes of label, annotation and
// finalizer keys. Requests are rewritten presented -> target, responses target -> presented.
//
// It is pure: functions over paths, queries and JSON bytes, no HTTP and no network, so that
// the proxy decides what to call and every rule can be tested and fuzzed on its own. JSON is
// edited in place with gjson/sjson (members, order and numbers are kept as they came); Lists,
// Tables and watch streams are rewritten item by item, frame by frame, so memory does not grow
// with the size of a response.
//
// Known limit: a target key or group that already carries a presented name (e.g. the upstream
// kubevirt.io installed next to its renamed fork) is hidden or shown as it is; rewriting such a
// name back would reach the renamed one. Discovery hides those groups; label keys pass as they are.
package rewrite
