#!/usr/bin/env bash
# Stops the node that start-node.sh started in DIR and undoes its changes to the host, leaving no process,
# mount, iptables rule, bridge or cgroup behind. Safe to run twice, and on a DIR where nothing runs (a clean-up
# after a run that was killed half-way: run it before start-node.sh).
#
#   stop-node.sh DIR        KEEP=1 keeps DIR whole; otherwise only its *.log files stay
#
# Order: pods are deleted through the API first, so the kubelet tears their networks down through the CNI
# plugins; then each component gets SIGTERM (SIGKILL after 10 s); containers still running are killed through
# containerd, and any process left in the kubepods cgroups or naming DIR on its command line is killed. A pid is
# only signalled while its command line names DIR, so a pid the system has since reused is never touched. Then
# kube-proxy's and the CNI plugins' iptables chains, the bridge, the mounts under DIR and the kubepods cgroups go,
# and the saved sysctls are restored. Exit 0 when the host is clean; 1, naming what is left, otherwise.
set -uo pipefail
[ $# -eq 1 ] && [ -n "$1" ] || { echo "usage: $0 DIR" >&2; exit 2; }
dir=$(cd "$1" 2>/dev/null && pwd) || exit 0
# Only a directory start-node.sh made (it leaves this mark first) is a node's: anything else is left alone.
[ "$dir" != / ] && [ -f "$dir/.kora-node" ] || exit 0
[ "$(id -u)" = 0 ] || { echo "stop-node: needs root" >&2; exit 1; }
bridge=kora0
bin=${KORA_K8S_BIN:-${XDG_CACHE_HOME:-$HOME/.cache}/kora/k8s-1.20.2/bin}
cd "$dir" || exit 0

# DIR as an extended regular expression, for matching whole paths (never a mere substring of a longer one).
dir_pattern=$(printf '%s' "$dir" | sed 's/[][\.*^$(){}?+|]/\\&/g')
ours() {  # ours PID: is PID alive and a process of this node (one of its arguments is DIR or a path under it)?
  [ -r "/proc/$1/cmdline" ] && tr '\0' '\n' < "/proc/$1/cmdline" | grep -qE -- "(^|=|//)$dir_pattern(/|$)"
}
alive() { [ -f "$1.pid" ] && ours "$(cat "$1.pid")"; }
stray() {  # stray PID: a process of this node that no pid file names (a shim), not this script or its caller
  ours "$1" && ! tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null | grep -qF stop-node.sh
}
stop() {  # stop NAME...: SIGTERM, wait up to 10 s, SIGKILL
  local name pid
  for name in "$@"; do
    [ -f "$name.pid" ] || continue
    pid=$(cat "$name.pid")
    [ "$pid" = "$$" ] || [ "$pid" = "$PPID" ] && continue  # the OWNER_PID watcher runs this script
    ours "$pid" && kill -TERM "$pid" 2>/dev/null
  done
  for name in "$@"; do
    [ -f "$name.pid" ] || continue
    pid=$(cat "$name.pid")
    [ "$pid" = "$$" ] || [ "$pid" = "$PPID" ] && continue
    for _ in $(seq 50); do ours "$pid" || break; sleep 0.2; done
    ours "$pid" && kill -KILL "$pid" 2>/dev/null
    rm -f "$name.pid"
  done
}
# Bounded: a wedged containerd must not hang the clean-up.
ctr=(timeout 15 ctr --address "$dir/containerd.sock" -n k8s.io)

if alive kubelet && alive apiserver; then
  "$bin/kubectl" --kubeconfig="$dir/kubeconfig" --request-timeout=10s delete pods --all --all-namespaces \
    --grace-period=0 --force --wait=false >/dev/null 2>&1
  for _ in $(seq 150); do [ -z "$("${ctr[@]}" tasks ls -q 2>/dev/null)" ] && break; sleep 0.2; done
fi
stop watcher dnsmasq node-dns kube-proxy kubelet scheduler kcm apiserver etcd
if alive containerd; then
  for task in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks kill -s SIGKILL "$task" >/dev/null 2>&1; done
  for _ in $(seq 25); do [ -z "$("${ctr[@]}" tasks ls -q 2>/dev/null)" ] && break; sleep 0.2; done
  for task in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks delete -f "$task" >/dev/null 2>&1; done
  for container in $("${ctr[@]}" containers ls -q 2>/dev/null); do
    "${ctr[@]}" containers delete "$container" >/dev/null 2>&1
  done
fi
stop containerd

# Whatever still runs: container processes in the kubepods cgroups, containerd shims (their command lines name
# DIR's socket).
kubepods=$(ls -d /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods 2>/dev/null)
for _ in 1 2 3; do
  left=$( (for cg in $kubepods; do find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null; done
           for p in /proc/[0-9]*; do stray "${p#/proc/}" && echo "${p#/proc/}"; done) | sort -u)
  [ -z "$left" ] && break
  kill -KILL $left 2>/dev/null
  sleep 0.5
done

# iptables: kube-proxy's own clean-up, then every KUBE-* and CNI-* rule and chain that remains (the kubelet's and
# the bridge plugin's are not kube-proxy's to remove). grep, not grep -q: an early exit fails the pipe.
[ -x "$bin/kube-proxy" ] && "$bin/kube-proxy" --cleanup >/dev/null 2>&1
for tool in iptables ip6tables; do
  command -v "$tool-save" >/dev/null || continue
  if "$tool-save" 2>/dev/null | grep -E 'KUBE-|CNI-' >/dev/null; then
    "$tool-save" | grep -vE 'KUBE-|CNI-' | "$tool-restore"
  fi
done
ip link del "$bridge" 2>/dev/null
findmnt -rn -o TARGET | grep -E -- "^$dir_pattern/" | sort -r | while read -r target; do
  umount "$target" 2>/dev/null || umount -l "$target"
done
for cg in $kubepods; do find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null; done
[ -f created-host-dirs ] && sort -u created-host-dirs | while read -r path; do rm -rf "$path"; done
rm -f created-host-dirs
[ -f sysctl.saved ] && sysctl -q -p sysctl.saved 2>/dev/null

# What is left, if anything, is named: a test asserts on this exit status.
problems=()
for p in /proc/[0-9]*; do stray "${p#/proc/}" && problems+=("process ${p#/proc/}"); done
findmnt -rn -o TARGET | grep -qE -- "^$dir_pattern/" && problems+=("mounts under $dir")
ip link show "$bridge" >/dev/null 2>&1 && problems+=("bridge $bridge")
iptables-save 2>/dev/null | grep -E 'KUBE-|CNI-' >/dev/null && problems+=("iptables chains KUBE-/CNI-")
for cg in $kubepods; do [ -d "$cg" ] && problems+=("cgroup $cg"); done
if [ ${#problems[@]} -gt 0 ]; then
  echo "stop-node: left behind: ${problems[*]}" >&2
  exit 1
fi
if [ "${KEEP:-0}" != 1 ]; then
  find "$dir" -mindepth 1 -maxdepth 1 ! -name '*.log' -exec rm -rf {} +
fi
echo "stop-node: stopped" >&2
