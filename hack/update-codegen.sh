#!/usr/bin/env bash
# Regenerates everything generated in this repository: deepcopy, defaulters, conversions and
# OpenAPI definitions next to the API types, and the typed clientset, apply configurations,
# listers and informers under pkg/generated, the generated files of the kcp bundle
# (artifacts/kcp: the APIResourceSchema of Mounts and the APIExports naming it), and the
# references under docs/reference (the Mount API and every command's flags). Uses
# kube_codegen.sh from the code-generator module pinned in go.mod, so the generators match the
# k8s.io libraries we build against.
set -o errexit -o nounset -o pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${REPO_ROOT}"

MODULE=$(go list -m)
# On a fresh machine the module is not in the module cache yet, and `go list -m` would name
# no directory.
go mod download k8s.io/code-generator
CODEGEN_PKG=$(go list -m -f '{{.Dir}}' k8s.io/code-generator)
if [ ! -f "${CODEGEN_PKG}/kube_codegen.sh" ]; then
    echo "cannot find kube_codegen.sh of k8s.io/code-generator (got '${CODEGEN_PKG}')" >&2
    exit 1
fi
# shellcheck source=/dev/null
source "${CODEGEN_PKG}/kube_codegen.sh"

BOILERPLATE="${REPO_ROOT}/hack/boilerplate.go.txt"

kube::codegen::gen_helpers \
    --boilerplate "${BOILERPLATE}" \
    "${REPO_ROOT}/pkg/apis"

# k8s.io/api/core/v1: the standalone server serves core v1 Secrets itself; the self reviews
# of authentication/v1 and authorization/v1 too, and events.k8s.io/v1 Events.
kube::codegen::gen_openapi \
    --extra-pkgs k8s.io/api/core/v1 \
    --extra-pkgs k8s.io/api/authentication/v1 \
    --extra-pkgs k8s.io/api/authorization/v1 \
    --extra-pkgs k8s.io/api/events/v1 \
    --output-dir "${REPO_ROOT}/pkg/generated/openapi" \
    --output-pkg "${MODULE}/pkg/generated/openapi" \
    --output-model-name-file zz_generated.model_name.go \
    --report-filename "${REPO_ROOT}/hack/api-rules-violations.list" \
    --update-report \
    --boilerplate "${BOILERPLATE}" \
    "${REPO_ROOT}/pkg/apis"

kube::codegen::gen_client \
    --with-watch \
    --with-applyconfig \
    --output-dir "${REPO_ROOT}/pkg/generated" \
    --output-pkg "${MODULE}/pkg/generated" \
    --boilerplate "${BOILERPLATE}" \
    "${REPO_ROOT}/pkg/apis"

# The kcp bundle: the APIResourceSchema of Mounts from the OpenAPI generated above (named by a
# hash of its content, since kcp refuses changes to a schema; with the server's short names,
# which kcp serves from the schema) and the APIExports that name it. artifacts/kcp-main, the
# bundle for kcp main, is an overlay of artifacts/kcp and takes both from there.
go run ./hack/tools/kcp-artifacts --output-dir "${REPO_ROOT}/artifacts/kcp"

# docs/reference: the Mount API from the OpenAPI generated above, and the flags of every
# command and subcommand from the cobra commands (run again after adding or changing a flag).
go run ./hack/tools/reference-docs --output-dir "${REPO_ROOT}/docs/reference"
