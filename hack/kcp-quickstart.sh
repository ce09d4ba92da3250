#!/usr/bin/env bash
# kcp-quickstart.sh: the steps of docs/kcp.md, in order, on loopback: mount-apiserver's PKI,
# kcp's certificates and users, kcp (standalone shard on 6443) and kcp-front-proxy (6444),
# the provider, consumer and target workspaces, the bundle, mount-apiserver (64430, which
# extends the shard's virtual-workspace URL as kcp v0.32.3 requires), a URL Mount in the
# consumer workspace and a workspace mounted on it, used as alice.
#
# Needs kcp, kcp-front-proxy, mount-apiserver, kubectl and openssl on PATH, and ports 6443,
# 6444 and 64430 free. Everything lives in WORK (default: a new temporary directory); the
# processes stop when the script ends, unless KEEP=1, which leaves them running and prints
# how to reach them. KCP_VERSION=main uses artifacts/kcp-main (kcp main's cache kinds).
#
# This script cannot run in this repository's CI (kcp cannot be built there);
# test/integration/kcp_docs_test.go runs the kubectl steps of docs/kcp.md against the kcp
# harness instead. Keep the two the same commands.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=${WORK:-$(mktemp -d)}
for bin in kcp kcp-front-proxy mount-apiserver kubectl openssl; do
  command -v "$bin" >/dev/null || { echo "kcp-quickstart: $bin is not on PATH" >&2; exit 1; }
done
cd "$WORK"
ln -sfn "$REPO/artifacts" artifacts
echo "kcp-quickstart: working in $WORK"

pids=()
stop() {
  if [ "${KEEP:-}" != 1 ]; then
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
  fi
}
trap stop EXIT
wait_for() { # wait_for <seconds> <command...>
  local n=$1; shift
  until "$@" >/dev/null 2>&1; do
    n=$((n - 1)); if [ "$n" -le 0 ]; then echo "kcp-quickstart: timed out: $*" >&2; exit 1; fi
    sleep 1
  done
}

# 1. Before kcp starts: certificates and users.
mount-apiserver ca --root-directory mounts > mount-apiserver-ca.crt
mkdir -p certs
openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=kcp-shard-client-ca \
  -keyout certs/shard-client-ca.key -out certs/shard-client-ca.crt
openssl req -newkey rsa:2048 -nodes -subj /CN=kcp-shard -keyout certs/shard-client.key -out certs/shard-client.csr
openssl x509 -req -in certs/shard-client.csr -CA certs/shard-client-ca.crt -CAkey certs/shard-client-ca.key \
  -CAcreateserial -days 365 -extfile <(echo extendedKeyUsage=clientAuth) -out certs/shard-client.crt
openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj /CN=kcp-front-proxy-ca \
  -keyout certs/front-proxy-ca.key -out certs/front-proxy-ca.crt
openssl req -newkey rsa:2048 -nodes -subj /CN=kcp-front-proxy -keyout certs/front-proxy-client.key -out certs/front-proxy-client.csr
openssl x509 -req -in certs/front-proxy-client.csr -CA certs/front-proxy-ca.crt -CAkey certs/front-proxy-ca.key \
  -CAcreateserial -days 365 -extfile <(echo extendedKeyUsage=clientAuth) -out certs/front-proxy-client.crt
cat > tokens.csv <<'EOF'
mount-apiserver-token,mount-apiserver,mount-apiserver,""
alice-token,alice,alice,"team"
prod-reader-token,prod-reader,prod-reader,""
EOF

# 2. kcp and its front-proxy.
kcp start --root-directory .kcp \
  --feature-gates=WorkspaceMounts=true,CacheAPIs=true \
  --token-auth-file=tokens.csv \
  --shard-client-cert-file=certs/shard-client.crt --shard-client-key-file=certs/shard-client.key \
  --shard-virtual-workspace-ca-file=mount-apiserver-ca.crt \
  --shard-virtual-workspace-url=https://127.0.0.1:6443 \
  --requestheader-client-ca-file=certs/front-proxy-ca.crt \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- > kcp.log 2>&1 &
pids+=($!)
wait_for 120 kubectl --kubeconfig .kcp/admin.kubeconfig get --raw /readyz
cat > mapping.yaml <<'EOF'
- path: /services/mounts
  backend: https://127.0.0.1:64430
  backend_server_ca: mount-apiserver-ca.crt
  proxy_client_cert: certs/front-proxy-client.crt
  proxy_client_key: certs/front-proxy-client.key
- path: /services/
  backend: https://127.0.0.1:6443
  backend_server_ca: .kcp/apiserver.crt
  proxy_client_cert: certs/front-proxy-client.crt
  proxy_client_key: certs/front-proxy-client.key
- path: /clusters/
  backend: https://127.0.0.1:6443
  backend_server_ca: .kcp/apiserver.crt
  proxy_client_cert: certs/front-proxy-client.crt
  proxy_client_key: certs/front-proxy-client.key
EOF
kcp-front-proxy --secure-port=6444 --mapping-file=mapping.yaml \
  --root-kubeconfig=.kcp/admin.kubeconfig --shards-kubeconfig=.kcp/admin.kubeconfig \
  --tls-cert-file=.kcp/apiserver.crt --tls-private-key-file=.kcp/apiserver.key \
  --client-ca-file=.kcp/client-ca.crt --token-auth-file=tokens.csv > front-proxy.log 2>&1 &
pids+=($!)

# 3. Workspaces: provider, consumer, target (through the front-proxy, as kcp's admin).
KCP=https://127.0.0.1:6444
export KUBECONFIG=$PWD/.kcp/admin.kubeconfig
wait_for 60 kubectl --server "$KCP/clusters/root" get --raw /readyz
for ws in mounts team prod; do
  kubectl --server "$KCP/clusters/root" apply -f - <<EOF
apiVersion: tenancy.kcp.io/v1alpha1
kind: Workspace
metadata:
  name: $ws
EOF
done
for ws in mounts team prod; do
  kubectl --server "$KCP/clusters/root" wait --for=jsonpath='{.status.phase}'=Ready workspace/$ws --timeout=120s
done
PROVIDER=$(kubectl --server "$KCP/clusters/root" get workspace mounts -o jsonpath='{.spec.cluster}')
TEAM=$(kubectl --server "$KCP/clusters/root" get workspace team -o jsonpath='{.spec.cluster}')
echo "provider: $PROVIDER, team: $TEAM"

# 4. The provider workspace.
BUNDLE=artifacts/kcp
if [ "${KCP_VERSION:-}" = main ]; then BUNDLE=artifacts/kcp-main; fi
MOUNTS=https://127.0.0.1:64430
kubectl --server "$KCP/clusters/root:mounts" apply -k "$BUNDLE"
kubectl --server "$KCP/clusters/root:mounts" create clusterrolebinding mounts-bind \
  --clusterrole=mounts-bind --group=team
SLICE=cachedresourceendpointslice
if [ "$BUNDLE" != artifacts/kcp ]; then SLICE=clustercachedresourceendpointslice; fi
kubectl --server "$KCP/clusters/root:mounts" patch $SLICE mount-apiserver --subresource=status \
  --type=merge -p "{\"status\":{\"endpoints\":[{\"url\":\"$MOUNTS\"}]}}"
kubectl --server "$KCP/clusters/root" apply -k artifacts/kcp/parent

# 5. The server.
kubectl config view --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d > kcp-ca.crt
kubectl config set-cluster kcp --server="$KCP" --certificate-authority=kcp-ca.crt --embed-certs --kubeconfig=mount-apiserver.kubeconfig
kubectl config set-credentials mount-apiserver --token=mount-apiserver-token --kubeconfig=mount-apiserver.kubeconfig
kubectl config set-context kcp --cluster=kcp --user=mount-apiserver --kubeconfig=mount-apiserver.kubeconfig
kubectl config use-context kcp --kubeconfig=mount-apiserver.kubeconfig
mount-apiserver --root-directory mounts --secure-port 64430 --kcp-mode \
  --kcp-shard-client-ca-file=certs/shard-client-ca.crt --kcp-shard-client-names=kcp-shard \
  --kcp-front-proxy-client-ca-file=certs/front-proxy-ca.crt --kcp-front-proxy-client-names=kcp-front-proxy \
  --kcp-kubeconfig=mount-apiserver.kubeconfig \
  --kcp-apiexport-url="$KCP/services/apiexport/$PROVIDER/mounts.kcp.io" \
  --path-prefix=/services/mounts \
  --external-base-url="$KCP/services/mounts" > mount-apiserver.log 2>&1 &
pids+=($!)

# 6. The consumer workspace.
TEAMCTL="kubectl --server $KCP/clusters/root:team"
$TEAMCTL apply -f artifacts/kcp/examples/apibinding.yaml
$TEAMCTL apply -k artifacts/kcp/consumer
$TEAMCTL apply -f artifacts/kcp/examples/consumer-bindings.yaml
$TEAMCTL create clusterrole secrets-editor --verb=get,create --resource=secrets,namespaces
$TEAMCTL create clusterrolebinding team-secrets --clusterrole=secrets-editor --group=team
$TEAMCTL create clusterrole workspace-creator --verb=get,list,watch,create --resource=workspaces.tenancy.kcp.io
$TEAMCTL create clusterrolebinding team-workspaces --clusterrole=workspace-creator --group=team
kubectl --server "$KCP/clusters/root" apply -f - <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: workspacetype-universal-use
rules:
  - apiGroups: ["tenancy.kcp.io"]
    resources: ["workspacetypes"]
    resourceNames: ["universal"]
    verbs: ["use"]
  - nonResourceURLs: ["/"]
    verbs: ["access"]
EOF
kubectl --server "$KCP/clusters/root" create clusterrolebinding team-workspacetype \
  --clusterrole=workspacetype-universal-use --group=team
until $TEAMCTL get mounts >/dev/null 2>&1; do sleep 1; done

# 7. A target, a Mount, a mounted workspace.
PRODCTL="kubectl --server $KCP/clusters/root:prod"
$PRODCTL apply -f - <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: prod-reader
rules:
  - apiGroups: [""]
    resources: ["users", "groups"]
    verbs: ["impersonate"]
  - apiGroups: ["authentication.k8s.io"]
    resources: ["*"]   # uids and userextras/<key>
    verbs: ["impersonate"]
  - nonResourceURLs: ["/"]
    verbs: ["access"]
EOF
$PRODCTL create clusterrolebinding prod-reader --clusterrole=prod-reader --user=prod-reader
$PRODCTL apply -f - <<EOF
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: workspace-access
rules:
  - nonResourceURLs: ["/"]
    verbs: ["access"]
EOF
$PRODCTL create clusterrolebinding team-access --clusterrole=workspace-access --group=team
$PRODCTL create clusterrole namespace-reader --verb=get,list --resource=namespaces
$PRODCTL create clusterrolebinding team-namespaces --clusterrole=namespace-reader --group=team

kubectl config set-cluster kcp --server="$KCP" --certificate-authority=kcp-ca.crt --embed-certs --kubeconfig=alice.kubeconfig
kubectl config set-credentials alice --token=alice-token --kubeconfig=alice.kubeconfig
kubectl config set-context team --cluster=kcp --user=alice --kubeconfig=alice.kubeconfig
kubectl config use-context team --kubeconfig=alice.kubeconfig
kubectl config set-cluster prod --server="$KCP/clusters/root:prod" --certificate-authority=kcp-ca.crt --embed-certs --kubeconfig=prod.kubeconfig
kubectl config set-credentials prod-reader --token=prod-reader-token --kubeconfig=prod.kubeconfig
kubectl config set-context prod --cluster=prod --user=prod-reader --kubeconfig=prod.kubeconfig
kubectl config use-context prod --kubeconfig=prod.kubeconfig

ALICE="kubectl --kubeconfig=alice.kubeconfig --server=$KCP/clusters/root:team"
$ALICE create namespace clusters
$ALICE -n clusters create secret generic prod --from-file=kubeconfig=prod.kubeconfig
# kcp v0.32.3 forwards without naming the caller: a Mount that reads a Secret is created
# through the front-proxy's mapping, which names her (kcp main names her either way).
kubectl --kubeconfig=alice.kubeconfig --server="$KCP/services/mounts/clusters/$TEAM" apply -f - <<EOF
apiVersion: mounts.kcp.io/v1alpha1
kind: Mount
metadata:
  name: prod
spec:
  type: URL
  ref: {namespace: clusters, name: prod}
EOF
$ALICE wait --for=jsonpath='{.status.phase}'=Ready mount/prod --timeout=120s
$ALICE get mounts
$ALICE get mnt prod -o wide
$ALICE apply -f - <<EOF
apiVersion: tenancy.kcp.io/v1alpha1
kind: Workspace
metadata:
  name: prod
spec:
  mount:
    ref: {apiVersion: mounts.kcp.io/v1alpha1, kind: Mount, name: prod}
EOF
$ALICE wait --for=jsonpath='{.status.phase}'=Ready workspace/prod --timeout=120s

kubectl --kubeconfig=alice.kubeconfig --server="$KCP/clusters/root:team:prod" auth whoami
kubectl --kubeconfig=alice.kubeconfig --server="$KCP/clusters/root:team:prod" get namespaces

if [ "${KEEP:-}" = 1 ]; then
  echo "kcp-quickstart: running (pids ${pids[*]}); as alice: kubectl --kubeconfig=$WORK/alice.kubeconfig --server=$KCP/clusters/root:team get mounts"
fi
