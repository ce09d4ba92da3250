#!/usr/bin/env bash
# Builds static Linux binaries of mount-apiserver and mount-agent and OCI images of them, with
# no image registry and no container daemon (hack/tools/images, on go-containerregistry).
# See docs/images.md. Writes, below OUTPUT_DIR:
#
#   bin/linux_<arch>/mount-apiserver, mount-agent   the static binaries
#   images/mount-apiserver.tar, mount-agent.tar     for docker load, podman load,
#                                                   kind load image-archive, ctr images import
#   images/oci/mount-apiserver/, mount-agent/       OCI image layouts, for skopeo copy and crane push
#
# Environment:
#   OUTPUT_DIR  where to write (default: _output in the repository, which git ignores)
#   VERSION     image tag and version stamped into the binaries (default: hack/VERSION's,
#               the tag the bundles in artifacts/ deploy)
#   REGISTRY    repository prefix of the image names (default: ghcr.io/kcp-dev, the bundles')
#   GOARCH      architecture of the binaries and images (default: this machine's)
#   CA_BUNDLE   CA certificates to install in the images
#               (default: /etc/ssl/certs/ca-certificates.crt, Debian's ca-certificates)
#   IMAGES      which images (default: "mount-apiserver mount-agent")
#   LICENSES    SPDX expression of the org.opencontainers.image.licenses label (default:
#               Apache-2.0, the license hack/boilerplate.go.txt states)
set -o errexit -o nounset -o pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${REPO_ROOT}"

OUTPUT_DIR=${OUTPUT_DIR:-${REPO_ROOT}/_output}
VERSION=${VERSION:-$(<"${REPO_ROOT}/hack/VERSION")}
REGISTRY=${REGISTRY:-ghcr.io/kcp-dev}
ARCH=${GOARCH:-$(go env GOARCH)}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
IMAGES=${IMAGES:-mount-apiserver mount-agent}
LICENSES=${LICENSES:-Apache-2.0}

# The commit, whether the tree differs from it, and its time, which is the images' creation
# time, so that one commit gives the same image digests on every build.
if REVISION=$(git rev-parse HEAD 2>/dev/null); then
    TREE_STATE=clean
    if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
        TREE_STATE=dirty
    fi
    CREATED=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
else
    REVISION=unknown TREE_STATE="" CREATED=${SOURCE_DATE_EPOCH:-0}
fi
BUILD_DATE=$(date -u -d "@${CREATED}" +%Y-%m-%dT%H:%M:%SZ)

BIN_DIR=${OUTPUT_DIR}/bin/linux_${ARCH}
mkdir -p "${BIN_DIR}" "${OUTPUT_DIR}/images"

pkgs=()
for image in ${IMAGES}; do
    pkgs+=("./cmd/${image}")
done
V=github.com/kcp-dev/mount-apiserver/pkg/version
LDFLAGS="-s -w -X ${V}.gitVersion=${VERSION} -X ${V}.gitCommit=${REVISION} -X ${V}.gitTreeState=${TREE_STATE} -X ${V}.buildDate=${BUILD_DATE}"

echo "building ${IMAGES} ${VERSION} (${REVISION}${TREE_STATE:+, ${TREE_STATE}}) for linux/${ARCH} into ${BIN_DIR}"
start=${SECONDS}
# Static (no cgo: the images have no libc), without local paths, stamped as pkg/version says.
CGO_ENABLED=0 GOOS=linux GOARCH=${ARCH} go build -trimpath -buildvcs=false -ldflags "${LDFLAGS}" -o "${BIN_DIR}/" "${pkgs[@]}"
echo "binaries built in $((SECONDS - start))s"

start=${SECONDS}
# The image tool runs on this machine, whatever GOOS and GOARCH the binaries are for.
env -u GOOS -u GOARCH GOWORK=off go -C hack/tools/images run . \
    --bin-dir "${BIN_DIR}" \
    --output-dir "${OUTPUT_DIR}/images" \
    --registry "${REGISTRY}" \
    --version "${VERSION}" \
    --revision "${REVISION}" \
    --created "${CREATED}" \
    --arch "${ARCH}" \
    --ca-bundle "${CA_BUNDLE}" \
    --licenses "${LICENSES}" \
    --images "$(echo ${IMAGES} | tr ' ' ,)"
echo "images assembled in $((SECONDS - start))s"
