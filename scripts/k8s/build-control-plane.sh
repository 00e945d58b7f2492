#!/usr/bin/env bash
# Builds the Kubernetes binaries Kora's tests run: kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet and kube-proxy v1.20.2, compiled in one `make` from Debian bookworm's `kubernetes` source package with
# Debian's Go 1.19, plus Debian's etcd and kubectl binaries. The operator's fast tests run the first two as a bare
# control plane (scripts/k8s/start-control-plane.sh); the e2e tier runs all five as a real node where pods run
# (scripts/k8s/start-node.sh). No registry ships usable binaries of these, so this is the one way to get real
# ones on a machine that can reach only Debian's archive.
#
# Output: $KORA_K8S_HOME/bin/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy,etcd,
# kubectl}; the directory is printed on stdout (the only stdout line). KORA_K8S_HOME defaults to
# ${XDG_CACHE_HOME:-$HOME/.cache}/kora/k8s-1.20.2. Idempotent: a finished build is recognised by
# $KORA_K8S_HOME/bin/.complete, written only after every binary has been installed and has run, and naming
# them; anything else (an interrupted build, an older cache with fewer binaries) is finished or redone.
# Concurrent callers wait on a lock instead of building twice. About 10-12 minutes on 2 quiet cores, once per
# machine (the five share most packages, so one make is much cheaper than two).
#
# Nothing is installed system-wide except, when missing, the few host tools the build needs (make, curl,
# openssl, ...), through apt-get (as root or with sudo). The Debian packages themselves are unpacked with
# `dpkg -x` under $KORA_K8S_HOME using a private apt configuration.
# Limits of the result: Kubernetes 1.20 (no CEL validation rules in CRDs).
set -euo pipefail

home=${KORA_K8S_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/kora/k8s-1.20.2}
bin=$home/bin
log() { echo "build-control-plane: $*" >&2; }

binaries="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy"
complete() { [ -f "$bin/.complete" ] && [ "$(cat "$bin/.complete")" = "$binaries etcd kubectl" ]; }
complete && { echo "$bin"; exit 0; }

# --- host tools -------------------------------------------------------------------------------------------
. "$(dirname "$(readlink -f "$0")")/../lib/host-tools.sh"
ensure_host_tools make:make curl:curl openssl:openssl tar:tar gzip:gzip xz:xz-utils flock:util-linux

mkdir -p "$home"
exec 9>"$home/.lock"
flock -n 9 || { log "another build of these binaries holds $home/.lock: waiting for it to finish"; flock 9; }
complete && { echo "$bin"; exit 0; }   # another caller finished while we waited

# --- Debian packages, through a private apt configuration --------------------------------------------------
# The source list names bookworm explicitly so the result is the same whatever the host's release.
mkdir -p "$home"/{debs,src,apt/lists/partial,apt/cache/archives/partial,shim,root}
cat > "$home/apt/sources.list" <<LIST
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian-security bookworm-security main
deb-src http://deb.debian.org/debian bookworm main
deb-src http://deb.debian.org/debian-security bookworm-security main
LIST
cat > "$home/apt/apt.conf" <<CONF
Dir::Etc::SourceList "$home/apt/sources.list";
Dir::Etc::SourceParts "/nonexistent";
Dir::State::Lists "$home/apt/lists";
Dir::Cache "$home/apt/cache";
Dir::Etc::Trusted "/usr/share/keyrings/debian-archive-keyring.gpg";
Dir::Etc::TrustedParts "/nonexistent";
CONF
export APT_CONFIG=$home/apt/apt.conf
log "fetching Debian package lists"
apt-get -q update >&2
if ! ls "$home"/debs/*.deb >/dev/null 2>&1 || [ ! -f "$home/debs/.complete" ]; then
  rm -f "$home"/debs/*.deb
  (cd "$home/debs" && apt-get -q download etcd-server kubernetes-client golang-1.19-go golang-1.19-src \
     golang-github-modern-go-reflect2-dev >&2)
  touch "$home/debs/.complete"
fi
rm -rf "$home/root" && mkdir -p "$home/root"
for deb in "$home"/debs/*.deb; do dpkg -x "$deb" "$home/root"; done

# A previous interrupted run may have left a half-unpacked tree: always start from the tarball.
rm -rf "$home"/src/kubernetes-1.20*/
if ! ls "$home"/src/kubernetes_1.20*.orig.tar.gz >/dev/null 2>&1; then
  (cd "$home/src" && apt-get -q source --download-only kubernetes >&2)
fi
(cd "$home/src" && tar xzf kubernetes_1.20*.orig.tar.gz)
src=$(ls -d "$home"/src/kubernetes-1.20*/ | head -1)

# kubernetes 1.20 vendors reflect2 v1.0.1, which crashes under Go >= 1.18 (the first custom-resource create
# segfaults the apiserver); Debian's reflect2 1.0.2 is API-compatible and fixed.
rm -rf "$src/vendor/github.com/modern-go/reflect2"
cp -a "$home/root/usr/share/gocode/src/github.com/modern-go/reflect2" "$src/vendor/github.com/modern-go/"
rm -f "$src/vendor/github.com/modern-go/reflect2/go.mod"
# Kubernetes' build scripts call rsync only as `rsync -pc SRC DST`; a copy does the same and spares a package.
printf '#!/bin/sh\nshift; exec cp -p "$@"\n' > "$home/shim/rsync" && chmod +x "$home/shim/rsync"

# --- compile -------------------------------------------------------------------------------------------
log "compiling $binaries (about ten minutes)"
(
  export GOROOT=$home/root/usr/lib/go-1.19 GOCACHE=$home/gocache GOPROXY=off CGO_ENABLED=0 HOME=$home
  export PATH=$home/shim:$GOROOT/bin:$PATH
  unset GOPATH GOFLAGS GO111MODULE
  cd "$src"
  make WHAT="$(for b in $binaries; do printf 'cmd/%s ' "$b"; done)" KUBE_GIT_VERSION=v1.20.2 KUBE_GIT_TREE_STATE=clean >&2
)

# --- install, then mark finished ------------------------------------------------------------------------
rm -rf "$bin.tmp" && mkdir -p "$bin.tmp"
for b in $binaries; do cp "$src/_output/bin/$b" "$bin.tmp/"; done
cp "$home/root/usr/bin/etcd" "$home/root/usr/bin/kubectl" "$bin.tmp/"
for b in $binaries etcd; do "$bin.tmp/$b" --version >/dev/null; done
"$bin.tmp/kubectl" version --client >/dev/null
# A running cluster holds the old binaries open: replace the directory, not the files under it.
rm -rf "$bin" && mv "$bin.tmp" "$bin"
echo "$binaries etcd kubectl" > "$bin/.complete"
# Sources, toolchain, packages and Go's build cache (about 700 MB) are not needed any more.
rm -rf "$home"/{src,root,debs,apt,shim,gocache}
log "done"
echo "$bin"
