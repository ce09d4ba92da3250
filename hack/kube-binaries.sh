#!/usr/bin/env bash
# Builds the real kube-apiserver, kubectl and etcd binaries used by integration tests from the
# module in hack/tools/kube (k8s.io/kubernetes plus the etcd server it pins), and caches them
# outside the repository. Prints ONLY the absolute path of the directory holding the three
# binaries on stdout; progress goes to stderr. Usage from anywhere:
#
#   KUBE_BIN_DIR="$(hack/kube-binaries.sh)"
#
# Cache layout: ${MOUNT_APISERVER_KUBE_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mount-apiserver}/
#   kube-<kube version>-etcd-<etcd version>-<hash>/{kube-apiserver,kubectl,etcd}
# where <hash> is a short hash of hack/tools/kube/go.mod, go.sum and the build recipe below, so
# changing any pinned version (or the link flags) builds into a fresh directory. Later runs
# that find all three executables return at once without invoking go. Builds go to a temporary
# directory that is renamed into place when complete, so an interrupted build never leaves a
# half-filled cache; concurrent callers are serialised with flock when it is available.

set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
MOD_DIR="${REPO_ROOT}/hack/tools/kube"
BINARIES=(kube-apiserver kubectl etcd)

log() { echo "kube-binaries: $*" >&2; }

# module_version prints the version that hack/tools/kube/go.mod requires for module $1.
module_version() {
  awk -v mod="$1" '
    $1 == "require" && $2 == mod { print $3; exit }
    $1 == mod && $2 ~ /^v/       { print $2; exit }
  ' "${MOD_DIR}/go.mod"
}

KUBE_VERSION="$(module_version k8s.io/kubernetes)"
ETCD_VERSION="$(module_version go.etcd.io/etcd/server/v3)"
if [[ ! "${KUBE_VERSION}" =~ ^v([0-9]+)\.([0-9]+)\. ]]; then
  log "cannot read the k8s.io/kubernetes version from ${MOD_DIR}/go.mod"
  exit 1
fi
KUBE_MAJOR="${BASH_REMATCH[1]}"
KUBE_MINOR="${BASH_REMATCH[2]}"
if [[ -z "${ETCD_VERSION}" ]]; then
  log "cannot read the go.etcd.io/etcd/server/v3 version from ${MOD_DIR}/go.mod"
  exit 1
fi

# Bump when the way the binaries are built changes, to invalidate existing caches.
RECIPE="v1 CGO_ENABLED=0 -trimpath -ldflags=-s,-w,version-stamps"

HASH="$( { cat "${MOD_DIR}/go.mod" "${MOD_DIR}/go.sum"; echo "${RECIPE}"; } | sha256sum | cut -c1-10)"
CACHE_BASE="${MOUNT_APISERVER_KUBE_BIN_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/mount-apiserver}"
BIN_DIR="${CACHE_BASE}/kube-${KUBE_VERSION}-etcd-${ETCD_VERSION}-${HASH}"

have_all() {
  local b
  for b in "${BINARIES[@]}"; do
    [[ -f "${BIN_DIR}/${b}" && -x "${BIN_DIR}/${b}" ]] || return 1
  done
}

print_dir() { (cd "${BIN_DIR}" && pwd -P); }

# Fast path: everything is already there.
if have_all; then
  print_dir
  exit 0
fi

mkdir -p "${CACHE_BASE}"

# Serialise concurrent builds of the same cache (e.g. several test packages starting at once).
if command -v flock >/dev/null 2>&1; then
  exec 9>"${CACHE_BASE}/.lock"
  if ! flock -n 9; then
    log "waiting for another build holding ${CACHE_BASE}/.lock"
    flock 9
  fi
  if have_all; then
    print_dir
    exit 0
  fi
  # Holding the lock, no other build is running: drop temp dirs of interrupted builds.
  rm -rf "${CACHE_BASE}"/.build-*
fi

# A directory without all three binaries is left over from something else: rebuild it.
if [[ -e "${BIN_DIR}" ]]; then
  log "removing incomplete ${BIN_DIR}"
  rm -rf "${BIN_DIR}"
fi

TMP_DIR="$(mktemp -d "${CACHE_BASE}/.build-XXXXXX")"
# The build's own compile cache is thrown away with it: the three binaries are the cache, and
# kept, these -trimpath CGO_ENABLED=0 objects (which the project's builds never share) would hold
# a CI machine's disk for the rest of its run.
BUILD_CACHE="$(mktemp -d "${CACHE_BASE}/.build-gocache-XXXXXX")"
cleanup() { rm -rf "${TMP_DIR}" "${BUILD_CACHE}"; }
trap cleanup EXIT

cd "${MOD_DIR}"
export GOWORK=off CGO_ENABLED=0 GOCACHE="${BUILD_CACHE}"

# Stamp the commit and its date from the module proxy's metadata, as release builds do.
GIT_COMMIT=""
BUILD_DATE="1970-01-01T00:00:00Z"
info_file="$(go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/^[[:space:]]*"Info": "\(.*\)",\{0,1\}$/\1/p')"
if [[ -n "${info_file}" && -f "${info_file}" ]]; then
  GIT_COMMIT="$(sed -n 's/.*"Hash":"\([0-9a-f]*\)".*/\1/p' "${info_file}")"
  BUILD_DATE="$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "${info_file}")"
fi

LDFLAGS="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDFLAGS+=" -X ${pkg}.gitVersion=${KUBE_VERSION}"
  LDFLAGS+=" -X ${pkg}.gitMajor=${KUBE_MAJOR}"
  LDFLAGS+=" -X ${pkg}.gitMinor=${KUBE_MINOR}"
  LDFLAGS+=" -X ${pkg}.gitTreeState=clean"
  LDFLAGS+=" -X ${pkg}.buildDate=${BUILD_DATE}"
  if [[ -n "${GIT_COMMIT}" ]]; then
    LDFLAGS+=" -X ${pkg}.gitCommit=${GIT_COMMIT}"
  fi
done

log "building kube-apiserver and kubectl ${KUBE_VERSION}, etcd ${ETCD_VERSION} into ${BIN_DIR} (cold: several minutes)"
start="${SECONDS}"
go build -trimpath -ldflags "${LDFLAGS}" -o "${TMP_DIR}/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kubectl >&2
# etcd's server main package is the root of go.etcd.io/etcd/server/v3 (it would be named
# "server" by default).
go build -trimpath -ldflags "-s -w" -o "${TMP_DIR}/etcd" go.etcd.io/etcd/server/v3 >&2

chmod 0755 "${TMP_DIR}"
mv -T "${TMP_DIR}" "${BIN_DIR}"
rm -rf "${BUILD_CACHE}"
trap - EXIT
log "built in $((SECONDS - start))s"

if ! have_all; then
  log "build finished but ${BIN_DIR} is incomplete"
  exit 1
fi
print_dir
