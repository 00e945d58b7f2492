#!/usr/bin/env bash
# Stops the control plane that start-control-plane.sh started in DIR: SIGTERM to each process (controller-
# manager, apiserver, etcd, the OWNER_PID watcher), SIGKILL to whatever is still there after 15 s, then waits
# until none is left. A pid is only signalled while its command line still names DIR, so a pid the system has
# since reused for something else is never touched. Safe to run twice; leaves DIR's files in place.
set -uo pipefail
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
dir=$(cd "$1" 2>/dev/null && pwd) || exit 0

ours() {  # ours PID: is PID alive and still a process of this control plane?
  [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' < "/proc/$1/cmdline" | grep -qF -- "$dir"
}
pids=()
for name in watcher kcm apiserver etcd; do
  [ -f "$dir/$name.pid" ] || continue
  pid=$(cat "$dir/$name.pid")
  # The watcher itself runs this script: it must not signal itself.
  [ "$pid" = "$$" ] || [ "$pid" = "$PPID" ] && continue
  ours "$pid" && kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
done
for _ in $(seq 150); do
  alive=()
  for pid in "${pids[@]}"; do ours "$pid" && alive+=("$pid"); done
  [ ${#alive[@]} -eq 0 ] && break
  sleep 0.1
done
for pid in "${alive[@]}"; do kill -KILL "$pid" 2>/dev/null; done
for _ in $(seq 50); do
  left=0
  for pid in "${alive[@]}"; do ours "$pid" && left=1; done
  [ $left = 0 ] && break
  sleep 0.1
done
rm -f "$dir"/{watcher,kcm,apiserver,etcd}.pid
