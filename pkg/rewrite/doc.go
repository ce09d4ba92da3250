// Package rewrite renames a target's APIs as a renaming Mount presents them (spec.rewrites):
// API groups one to one with an optional kind prefix, and prefixes of label, annotation and
// finalizer keys. Requests are rewritten presented -> target, responses target -> presented.
//
// It is pure: functions over paths, queries and JSON bytes, no HTTP and no network, so that
// the proxy decides what to call and every rule can be tested and fuzzed on its own. Compile
// turns spec.rewrites into Rules; Rules.Request classifies a request and gives its target path
// and query; Request.Body and Request.Response rewrite its body and its answer. JSON is edited
// in place (gjson finds values, edits are spliced in one pass): members, order and numbers
// stay as they came. Lists and Tables are rewritten item by item and watch streams frame by
// frame, so memory does not grow with the size of a response. Most items take a fast path
// (fast.go) that walks only to where names can be; a stream indexes each item's containers
// while it reads it, reuses its buffers and computes each renamed name once, and a Read
// returns as many items as are at hand.
//
// Besides a renamed group's own objects, every object's metadata (label, annotation and
// finalizer keys, ownerReferences, managedFields, kubectl's last applied configuration), pod
// templates and selectors, and the references that CRDs, RBAC roles, webhook configurations,
// admission policies, access reviews and Events make to groups and resources are renamed.
//
// Every byte it reads comes from a caller or a target, both possibly hostile, so nothing
// recursive sees unchecked input: CheckJSON checks JSON iteratively, at most MaxDepth (10000,
// as kube-apiserver's decoders) levels deep, before gjson parses it, and the stream scanner
// counts depth as it reads. A value held while a stream is rewritten (an item, an event) is
// bounded (64 MiB); so are discovery and OpenAPI documents (64 MiB), which are read whole,
// refused as soon as they nest too deep, and whose memory is taken from a server-wide Budget
// (WithBudget). /openapi/v2 and a group's /openapi/v3 document are rewritten as the answer is
// read, without a copy of the whole. YAML apply patches whose aliases would expand them
// beyond the body bound are refused (pkg/yamlbound).
//
// Known limits: names are only renamed where an API says they are names (free-form strings,
// such as a ConfigMap's data, pass as they are). A target group or key that already carries a
// presented name (the upstream kubevirt.io installed next to its renamed fork) is shown as it
// is and would be written back renamed: discovery, OpenAPI and CRD lists hide such groups, but
// RBAC rules and label keys that name them cannot be told apart.
package rewrite
