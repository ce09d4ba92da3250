// Command reference-docs writes the generated references under docs/reference: api.md, the
// Mount API from the OpenAPI definitions (the Go doc comments of pkg/apis/mounts/v1alpha1),
// and flags.md, every command's flags from the cobra commands, grouped as --help shows them.
// hack/update-codegen.sh runs it, and hack/verify-codegen.sh fails when its output is stale:
//
//	go run ./hack/tools/reference-docs --output-dir docs/reference
package main
