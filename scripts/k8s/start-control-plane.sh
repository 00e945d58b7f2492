#!/usr/bin/env bash
# Starts a throw-away Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver and (unless KCM=0)
# kube-controller-manager, from the binaries of build-control-plane.sh. Ready in a few seconds.
#
#   start-control-plane.sh DIR      state, logs, pid files and DIR/kubeconfig go into DIR (created)
#   stop-control-plane.sh DIR       ends every process started here
#
# Environment (all optional):
#   KORA_K8S_BIN     directory of the binaries (default: the build's output, building it first if needed)
#   API_PORT         kube-apiserver's HTTPS port        } each defaults to a port that is free now; give
#   ETCD_PORT        etcd's client port                 } them explicitly to run several control planes
#   ETCD_PEER_PORT   etcd's peer port                   } side by side without races
#   KCM_PORT         kube-controller-manager's HTTPS port
#   KCM=0            no controller-manager at all
#   KCM_CONTROLLERS  its --controllers list; tests use `garbagecollector,namespace`, which keeps owner-reference
#                    cleanup and namespace deletion but not the deployment controller: with no kubelet no pod
#                    ever runs, and that controller would overwrite a Deployment status a test sets.
#   CRD_DIR          install the CRDs in this directory (server-side apply) and wait until they are Established
#                    before the controller-manager starts: its garbage collector then knows their kinds at once
#                    (it looks for new kinds only every 30 s, so owner references to a kind installed later are
#                    not followed until then)
#   OWNER_PID        stop the control plane by itself once this process is gone (a test run that crashed)
#
# Prints `export KUBECONFIG=DIR/kubeconfig` (the only stdout line). The kubeconfig authenticates with a random
# bearer token in group system:masters and trusts the apiserver's self-signed certificate.
# Exit status 1, with the failing component's log tail on stderr, when something does not come up in 60 s.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
mkdir -p "$1"
dir=$(cd "$1" && pwd)
bin=${KORA_K8S_BIN:-$("$here/build-control-plane.sh")}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
api_port=${API_PORT:-$(free_port)}
etcd_port=${ETCD_PORT:-$(free_port)}
etcd_peer_port=${ETCD_PEER_PORT:-$(free_port)}
kcm_port=${KCM_PORT:-$(free_port)}

cd "$dir"
fail() {
  echo "start-control-plane: $1; last lines of $2:" >&2
  tail -n 30 "$dir/$2" >&2 || true
  "$here/stop-control-plane.sh" "$dir" >&2 || true
  exit 1
}
# Each component gets its own session, so a Ctrl-C meant for the caller does not reach it half-way: stopping
# is stop-control-plane.sh's job (or the OWNER_PID watcher's).
launch() {  # launch NAME COMMAND...: start in the background, output to NAME.log, pid to NAME.pid
  local name=$1; shift
  setsid "$@" > "$dir/$name.log" 2>&1 < /dev/null &
  echo $! > "$dir/$name.pid"
}

openssl genrsa -out sa.key 2048 2>/dev/null
openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
token=$(openssl rand -hex 24)
echo "$token,kora-test-admin,kora-test-admin,system:masters" > tokens.csv
chmod 600 tokens.csv sa.key

launch etcd "$bin/etcd" --name default --data-dir "$dir/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster "default=http://127.0.0.1:$etcd_peer_port" --unsafe-no-fsync --log-level warn

launch apiserver "$bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" \
  --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" --insecure-port=0 \
  --cert-dir="$dir/certs" --token-auth-file="$dir/tokens.csv" --authorization-mode=RBAC \
  --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$dir/sa.pub" \
  --service-account-signing-key-file="$dir/sa.key" --service-cluster-ip-range=10.96.0.0/24 \
  --disable-admission-plugins=ServiceAccount --enable-priority-and-fairness=false

ready() {  # ready URL PIDFILE LOG: poll URL until it answers "ok"
  for _ in $(seq 600); do
    kill -0 "$(cat "$dir/$2")" 2>/dev/null || fail "$(basename "$2" .pid) exited" "$3"
    [ "$(curl -sk --max-time 2 -H "Authorization: Bearer $token" "$1" 2>/dev/null)" = ok ] && return 0
    sleep 0.1
  done
  fail "$1 not ready after 60 s" "$3"
}
ready "https://127.0.0.1:$api_port/readyz" apiserver.pid apiserver.log

# The apiserver wrote its self-signed certificate (with the signing CA appended) at start-up: trust exactly that.
cat > kubeconfig.tmp <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: kora-test
  cluster: {server: "https://127.0.0.1:$api_port", certificate-authority: "$dir/certs/apiserver.crt"}
users:
- name: kora-test-admin
  user: {token: "$token"}
contexts:
- name: kora-test
  context: {cluster: kora-test, user: kora-test-admin}
current-context: kora-test
KUBECONFIG
chmod 600 kubeconfig.tmp && mv kubeconfig.tmp kubeconfig

if [ -n "${CRD_DIR:-}" ]; then
  kubectl=("$bin/kubectl" --kubeconfig="$dir/kubeconfig" --cache-dir="$dir/kubectl-cache")
  # Server-side: client-side apply would store each CRD again in an annotation, too big for the Gateway API's.
  "${kubectl[@]}" apply --server-side --force-conflicts --field-manager=kora-tests -f "$CRD_DIR" > crds.log 2>&1 \
    || fail "installing the CRDs of $CRD_DIR failed" crds.log
  "${kubectl[@]}" wait --for condition=established --timeout=60s crd --all >> crds.log 2>&1 \
    || fail "the CRDs of $CRD_DIR were not Established within 60 s" crds.log
fi

if [ "${KCM:-1}" = 1 ]; then
  launch kcm "$bin/kube-controller-manager" --kubeconfig="$dir/kubeconfig" \
    --bind-address=127.0.0.1 --secure-port="$kcm_port" --port=0 --leader-elect=false \
    --controllers="${KCM_CONTROLLERS:-*,-nodeipam,-nodelifecycle,-csrsigning,-bootstrapsigner,-tokencleaner,-cloud-node-lifecycle,-route,-service}" \
    --service-account-private-key-file="$dir/sa.key" --root-ca-file="$dir/certs/apiserver.crt"
  ready "https://127.0.0.1:$kcm_port/healthz" kcm.pid kcm.log
fi

if [ -n "${OWNER_PID:-}" ]; then
  # A detached watcher: when the owner is gone without stopping us, stop everything ourselves.
  setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2" "$3"' \
    watcher "$OWNER_PID" "$here/stop-control-plane.sh" "$dir" > "$dir/watcher.log" 2>&1 < /dev/null &
  echo $! > "$dir/watcher.pid"
fi

echo "export KUBECONFIG=$dir/kubeconfig"
