#!/usr/bin/env bash
# Fails when generated code is stale: regenerates into a scratch copy of the tree and diffs.
set -o errexit -o nounset -o pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCRATCH=$(mktemp -d)
trap 'rm -rf "${SCRATCH}"' EXIT

# Copy what generation reads and writes; .git and build outputs are not needed.
tar -C "${REPO_ROOT}" --exclude=.git --exclude=.mount-apiserver --exclude=./_output -cf - . | tar -C "${SCRATCH}" -xf -
"${SCRATCH}/hack/update-codegen.sh"

status=0
for dir in pkg hack artifacts docs; do
    if ! diff -Naupr "${REPO_ROOT}/${dir}" "${SCRATCH}/${dir}"; then
        status=1
    fi
done
if [ "${status}" -ne 0 ]; then
    echo "Generated code is out of date. Run hack/update-codegen.sh and commit the result." >&2
    exit 1
fi
echo "Generated code is up to date."
