#!/usr/bin/env bash
# Starts a real single-node Kubernetes v1.20.2 cluster on this machine, offline, where pods run in containers:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd (its CRI plugin, runc, overlayfs),
# kubelet, kube-proxy (iptables mode) and a cluster DNS (dnsmasq fed by node-dns.py). Kora's e2e tier runs on it;
# the operator's fast tests use the bare control plane of start-control-plane.sh instead.
#
#   start-node.sh DIR      state, logs, pid files and DIR/kubeconfig go into DIR (created)
#   stop-node.sh DIR       ends every process started here and undoes every change to the host
#
# Environment (all optional):
#   KORA_K8S_BIN  directory of the binaries (default: the output of build-control-plane.sh, building it if needed)
#   OWNER_PID     stop the node by itself once this process is gone (a test run that crashed)
#
# Prints `export KUBECONFIG=DIR/kubeconfig` (the only stdout line) once the node is Ready, the default
# ServiceAccount exists and cluster DNS answers. Exit 1, with the failing component's log tail on stderr, when
# something does not come up in 120 s. Needs root (containers, bridge, iptables); installs its Debian packages
# (containerd, runc, CNI plugins, iptables, conntrack, dnsmasq, gcc) with apt-get when missing.
#
# What it changes on the host, all undone by stop-node.sh: the bridge kora0 (10.244.0.1/24, the pod network),
# iptables rules (kube-proxy's KUBE-* chains, the bridge plugin's CNI-* masquerading), the cgroups kubepods/,
# the directories /var/log/pods and /var/log/containers when it created them, and the sysctls it sets (saved in
# DIR/sysctl.saved). Everything listens on the bridge address 10.244.0.1 or on loopback, never on the machine's
# own interfaces. One such node per machine: the bridge, subnet and kubelet ports are fixed. Run stop-node.sh
# first after a run that was killed half-way: it is safe on a directory with nothing running.
#
# Facts this depends on: the kubelet must use cgroupfs (no systemd here); containerd must clamp oom_score_adj
# (`restrict_oom_score_adj`), because this machine withholds CAP_SYS_RESOURCE even from root and runc otherwise
# fails every sandbox; Debian puts the CNI plugins in /usr/lib/cni; no registry is reachable, so images are
# imported with load-image.sh and pods use `imagePullPolicy: Never`, and image garbage collection is off.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "start-node: needs root (containers, a bridge, iptables)" >&2; exit 1; }
log() { echo "start-node: $(date +%T) $*" >&2; }

. "$here/../lib/host-tools.sh"
ensure_host_tools containerd:containerd runc:runc /usr/lib/cni/bridge:containernetworking-plugins \
  iptables:iptables conntrack:conntrack dnsmasq:dnsmasq-base gcc:gcc /usr/include/signal.h:libc6-dev \
  umoci:umoci openssl:openssl curl:curl \
  ip:iproute2 sysctl:procps findmnt:util-linux setsid:util-linux python3:python3
bin=${KORA_K8S_BIN:-$("$here/build-control-plane.sh")}

[ -n "$1" ] && [ "$1" != / ] || { echo "start-node: DIR must be a directory of its own" >&2; exit 2; }
mkdir -p "$1"
dir=$(cd "$1" && pwd)
# The mark stop-node.sh looks for before it touches anything named after DIR.
touch "$dir/.kora-node"
node_ip=10.244.0.1 pod_cidr=10.244.0.0/24 service_cidr=10.96.0.0/24 dns_ip=10.96.0.10
api_port=16443 etcd_port=12379 bridge=kora0 node=kora-node
cd "$dir"
mkdir -p pki cni/net.d containerd kubelet dns images volume-plugins volumes
# Whatever stops this script half-way (a failed step under set -e) stops what it started, too.
trap '"$here/stop-node.sh" "$dir" >&2 || true' ERR

fail() {
  log "$1; last lines of $2:"
  tail -n 30 "$dir/$2" >&2 || true
  "$here/stop-node.sh" "$dir" >&2 || true
  exit 1
}
launch() {  # launch NAME COMMAND...: own session (a Ctrl-C for the caller does not reach it), log, pid file
  local name=$1; shift
  setsid "$@" > "$dir/$name.log" 2>&1 < /dev/null &
  echo $! > "$dir/$name.pid"
}
wait_until() {  # wait_until WHAT LOG COMMAND...: poll COMMAND for 120 s
  local what=$1 logfile=$2; shift 2
  for _ in $(seq 600); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  fail "$what not reached in 120 s" "$logfile"
}

# --- host settings, saved for stop-node.sh ------------------------------------------------------------------
# The kubelet sets the vm.* and kernel.* ones itself (its defaults for a node); kube-proxy sets route_localnet.
sysctls="net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.ipv4.conf.all.route_localnet
  vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
  kernel.keys.root_maxbytes"
if [ ! -f sysctl.saved ]; then
  for key in $sysctls; do  # one at a time: a key this kernel lacks (br_netfilter not loaded yet) is skipped
    value=$(sysctl -n "$key" 2>/dev/null) && echo "$key=$value"
  done > sysctl.saved
fi
for path in /var/log/pods /var/log/containers; do
  [ -e "$path" ] || echo "$path" >> created-host-dirs
done
sysctl -qw net.ipv4.ip_forward=1
# Without it, a pod reaching a Service whose endpoint is on the same bridge gets no answer: fail here, not later.
if ! sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null; then
  modprobe br_netfilter 2>/dev/null && sysctl -qw net.bridge.bridge-nf-call-iptables=1 ||
    { log "cannot set net.bridge.bridge-nf-call-iptables=1 (no br_netfilter module): Services would not work"; exit 1; }
  grep -qx net.bridge.bridge-nf-call-iptables=. sysctl.saved || echo net.bridge.bridge-nf-call-iptables=0 >> sysctl.saved
fi
ip link show "$bridge" >/dev/null 2>&1 || ip link add "$bridge" type bridge
ip addr show dev "$bridge" | grep -q "$node_ip/24" || ip addr add "$node_ip/24" dev "$bridge"
ip link set "$bridge" up

# --- credentials ----------------------------------------------------------------------------------------------
# A CA whose client certificate the apiserver shows the kubelet (exec, logs, port-forward), the ServiceAccount
# signing key, and a random admin token (group system:masters) for the kubeconfig.
if [ ! -f pki/ca.crt ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout pki/ca.key -out pki/ca.crt -days 365 -subj /CN=kora-node-ca 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -keyout pki/kubelet-client.key -out pki/kubelet-client.csr \
    -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" 2>/dev/null
  openssl x509 -req -in pki/kubelet-client.csr -CA pki/ca.crt -CAkey pki/ca.key -CAcreateserial \
    -out pki/kubelet-client.crt -days 365 2>/dev/null
  openssl genrsa -out pki/sa.key 2048 2>/dev/null
  openssl rsa -in pki/sa.key -pubout -out pki/sa.pub 2>/dev/null
  echo "$(openssl rand -hex 24),kora-node-admin,kora-node-admin,system:masters" > pki/tokens.csv
fi
chmod -R go-rwx pki
token=$(cut -d, -f1 pki/tokens.csv)
cat > kubeconfig <<KUBECONFIG
apiVersion: v1
kind: Config
clusters: [{name: kora-node, cluster: {server: "https://$node_ip:$api_port", insecure-skip-tls-verify: true}}]
users: [{name: kora-node-admin, user: {token: "$token"}}]
contexts: [{name: kora-node, context: {cluster: kora-node, user: kora-node-admin}}]
current-context: kora-node
KUBECONFIG
chmod 600 kubeconfig
kubectl=("$bin/kubectl" --kubeconfig="$dir/kubeconfig" --cache-dir="$dir/kubectl-cache")

# --- control plane --------------------------------------------------------------------------------------------
log "etcd, kube-apiserver"
launch etcd "$bin/etcd" --name default --data-dir "$dir/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
  --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 1))" \
  --initial-cluster "default=http://127.0.0.1:$((etcd_port + 1))" --unsafe-no-fsync --log-level warn
launch apiserver "$bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" \
  --bind-address="$node_ip" --advertise-address="$node_ip" --secure-port="$api_port" --insecure-port=0 \
  --cert-dir="$dir/pki/apiserver" --token-auth-file="$dir/pki/tokens.csv" --authorization-mode=Node,RBAC \
  --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$dir/pki/sa.pub" \
  --service-account-signing-key-file="$dir/pki/sa.key" --service-cluster-ip-range="$service_cidr" \
  --kubelet-preferred-address-types=InternalIP --kubelet-client-certificate="$dir/pki/kubelet-client.crt" \
  --kubelet-client-key="$dir/pki/kubelet-client.key" --enable-priority-and-fairness=false
wait_until "kube-apiserver ready" apiserver.log \
  sh -c "[ \"\$(curl -sk --max-time 2 -H 'Authorization: Bearer $token' https://$node_ip:$api_port/readyz)\" = ok ]"
log "kube-controller-manager, kube-scheduler"
launch kcm "$bin/kube-controller-manager" --kubeconfig="$dir/kubeconfig" --bind-address=127.0.0.1 \
  --secure-port=$((api_port + 1)) --port=0 --leader-elect=false --use-service-account-credentials=false \
  --controllers='*,-nodeipam,-csrsigning,-bootstrapsigner,-tokencleaner,-cloud-node-lifecycle,-route,-service' \
  --service-account-private-key-file="$dir/pki/sa.key" --root-ca-file="$dir/pki/apiserver/apiserver.crt"
launch scheduler "$bin/kube-scheduler" --kubeconfig="$dir/kubeconfig" --bind-address=127.0.0.1 \
  --secure-port=$((api_port + 2)) --port=0 --leader-elect=false

# --- containerd and the pod network ---------------------------------------------------------------------------
log "containerd"
cat > containerd/config.toml <<TOML
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.btrfs"]
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/kora-node/pause:1"
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$dir/cni/net.d"
TOML
cat > cni/net.d/10-kora.conflist <<JSON
{"cniVersion": "0.4.0", "name": "kora-node", "plugins": [
  {"type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_cidr", "gateway": "$node_ip"}]],
            "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$dir/cni/ipam"}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
JSON
launch containerd containerd --config "$dir/containerd/config.toml"
ctr=(ctr --address "$dir/containerd.sock" -n k8s.io)
wait_until "containerd serving" containerd.log "${ctr[@]}" version

# The sandbox ("pause") image: one static binary, packed by umoci, imported like any image.
if [ ! -f images/pause.oci.tar ]; then
  work=$(mktemp -d)
  umoci init --layout "$work/pause"
  umoci new --image "$work/pause:1"
  umoci unpack --image "$work/pause:1" "$work/bundle" >/dev/null
  gcc -static -Os -o "$work/bundle/rootfs/pause" "$here/pause.c"
  strip "$work/bundle/rootfs/pause"
  umoci repack --image "$work/pause:1" "$work/bundle"
  umoci config --image "$work/pause:1" --config.entrypoint /pause
  tar -C "$work/pause" -cf images/pause.oci.tar .
  rm -rf "$work"
fi
"$here/load-image.sh" "$dir" images/pause.oci.tar localhost/kora-node/pause >/dev/null

# --- kubelet and kube-proxy -----------------------------------------------------------------------------------
log "kubelet, kube-proxy"
cat > kubelet/config.yaml <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: $dir/pki/ca.crt}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failSwapOn: false
clusterDNS: [$dns_ip]
clusterDomain: cluster.local
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
serializeImagePulls: false
YAML
launch kubelet "$bin/kubelet" --config="$dir/kubelet/config.yaml" --kubeconfig="$dir/kubeconfig" \
  --container-runtime=remote --container-runtime-endpoint="unix://$dir/containerd.sock" \
  --root-dir="$dir/kubelet/root" --cert-dir="$dir/kubelet/pki" --hostname-override="$node" --node-ip="$node_ip" \
  --volume-plugin-dir="$dir/volume-plugins" --v=1
launch kube-proxy "$bin/kube-proxy" --kubeconfig="$dir/kubeconfig" --hostname-override="$node" \
  --bind-address="$node_ip" --proxy-mode=iptables --cluster-cidr=10.244.0.0/16 --conntrack-max-per-core=0 \
  --conntrack-tcp-timeout-established=0 --conntrack-tcp-timeout-close-wait=0 \
  --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256

# --- cluster DNS: dnsmasq on the node address, behind the Service kube-system/kube-dns --------------------------
# No upstream resolver: names outside cluster.local are not answered, so nothing a pod looks up leaves the node.
log "cluster DNS"
touch dns/cluster.hosts
launch node-dns python3 "$here/node-dns.py" "$dir/kubeconfig" "$dir/dns/cluster.hosts"
launch dnsmasq dnsmasq --keep-in-foreground --user=root --no-hosts --no-resolv --listen-address="$node_ip" \
  --bind-interfaces --hostsdir="$dir/dns" --local=/cluster.local/ --pid-file= --log-facility=-
"${kubectl[@]}" apply -f - > dns.log 2>&1 <<YAML || fail "creating the kube-dns Service failed" dns.log
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  clusterIP: $dns_ip
  ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: kube-dns, namespace: kube-system}
subsets: [{addresses: [{ip: $node_ip}], ports: [{name: dns, port: 53, protocol: UDP}, {name: dns-tcp, port: 53, protocol: TCP}]}]
YAML

wait_until "node $node Ready" kubelet.log sh -c "$(printf '%q ' "${kubectl[@]}") get node $node \
  -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
wait_until "the default ServiceAccount" kcm.log "${kubectl[@]}" -n default get serviceaccount default
wait_until "cluster DNS names written" node-dns.log grep -q "kube-dns.kube-system.svc.cluster.local" dns/cluster.hosts
kill -0 "$(cat dnsmasq.pid)" 2>/dev/null || fail "dnsmasq exited" dnsmasq.log

if [ -n "${OWNER_PID:-}" ]; then
  # A detached watcher: when the owner is gone without stopping the node, stop it.
  setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2" "$3"' \
    watcher "$OWNER_PID" "$here/stop-node.sh" "$dir" > "$dir/watcher.log" 2>&1 < /dev/null &
  echo $! > "$dir/watcher.pid"
fi
trap - ERR
log "node $node Ready"
echo "export KUBECONFIG=$dir/kubeconfig"
