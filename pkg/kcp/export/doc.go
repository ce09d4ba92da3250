// Package export builds what a kcp provider workspace needs to offer Mounts through an
// APIExport: the APIResourceSchema of mounts.kcp.io/v1alpha1, derived from the OpenAPI this
// server serves, and the APIExports that reference it by its content-derived name. It also
// decodes and checks the artifacts/kcp bundle, so that tests and tools read the bundle the way
// kcp would. hack/update-codegen.sh writes the generated files with hack/tools/kcp-artifacts.
package export
