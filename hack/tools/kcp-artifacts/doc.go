// Command kcp-artifacts writes the generated files of the artifacts/kcp bundle: the
// APIResourceSchema of Mounts, derived from the OpenAPI the server serves, and the APIExports
// that reference it by name. hack/update-codegen.sh runs it after the OpenAPI generator:
//
//	go run ./hack/tools/kcp-artifacts --output-dir artifacts/kcp
package main
