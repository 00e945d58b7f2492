#!/usr/bin/env bash
# Builds Kora's container image without Docker or a registry: the root filesystem from Debian bookworm's archive
# (mmdebstrap), the Python packages from the project's wheel and its exact pins (constraints.txt), packed as an
# OCI image by umoci. The same image the Dockerfile describes; see docs/image.md.
#
#   bash scripts/image/build.sh [--out DIR] [--tag TAG] [--extras LIST] [--no-bytecode]
#
#   --out DIR      where the results go (default: dist/image); replaced on every run
#   --tag TAG      the image's tag inside the archive (default: the version in pyproject.toml, followed by
#                  -<extras> when extras are named: 0.1.0-embeddings, the variant Hosted ModelAPIs run)
#   --extras LIST  optional extras to install, comma-separated (e.g. `embeddings`: torch, ~+1.4 GB; off by default)
#   --no-bytecode  leave out the compiled bytecode (__pycache__): ~30 MB smaller compressed, ~115 MB unpacked,
#                  but every start compiles what it imports (the image is read-only to its user), which roughly
#                  doubles the time to /health (docs/image.md has the measurements)
#
# Output, in DIR: kora-<TAG>.oci.tar (an OCI image archive: `skopeo copy oci-archive:DIR/kora-<TAG>.oci.tar:<TAG>
# docker://registry/kora:<TAG>`), rootfs/ (the image unpacked from that archive, for `chroot`), sizes.txt; the
# sizes are printed on stderr too, and the archive's path is the only line on stdout.
#
# Three layers: Debian (python3, python3-venv, ca-certificates, libnss-wrapper, libstdc++6: greenlet's C++ extension,
# which SQLAlchemy's asyncio and so the shared A2A task store need), the dependencies' virtualenv at /opt/kora/venv,
# and Kora itself. The first two are built once per (this script, constraints.txt, pyproject.toml, extras) and
# cached under ${XDG_CACHE_HOME:-~/.cache}/kora/image/<hash>; a code change rebuilds only Kora's layer (seconds).
#
# Needs root (mmdebstrap --mode=root, umoci unpack/repack keep file owners, chroot): re-runs itself with sudo
# when not root. Installs mmdebstrap, umoci and the Debian keyring with apt-get when missing. The Python
# packages are fetched by the host's pip (its configured indexes) into a wheelhouse, with a Python 3.11 (the
# image's: Debian's python3), then installed inside the chroot with --no-index: the chroot needs no network.
set -euo pipefail

script=$(readlink -f "$0")
cd "$(dirname "$script")/../.."
repo=$PWD
log() { echo "image: $*" >&2; }

out=$repo/dist/image
tag=
extras=
bytecode=yes
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$(readlink -m "$2"); shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --extras) extras=$2; shift 2 ;;
    --no-bytecode) bytecode=no; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$script" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) log "unknown argument $1 (see --help)"; exit 2 ;;
  esac
done

if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { log "needs root (mmdebstrap, umoci, chroot) and there is no sudo"; exit 1; }
  # The caller's cache and ownership of the results are kept across sudo.
  exec sudo --preserve-env=XDG_CACHE_HOME,PYTHON,PIP_INDEX_URL,PIP_EXTRA_INDEX_URL,PIP_FIND_LINKS \
    env KORA_IMAGE_OWNER="$(id -u):$(id -g)" HOME="$HOME" bash "$script" --out "$out" ${tag:+--tag "$tag"} \
    ${extras:+--extras "$extras"} $([ "$bytecode" = yes ] || echo --no-bytecode)
fi

# --- host tools -------------------------------------------------------------------------------------------
. scripts/lib/host-tools.sh
ensure_host_tools mmdebstrap:mmdebstrap umoci:umoci flock:util-linux unshare:util-linux

# The wheelhouse must hold wheels for the image's Python (Debian bookworm's 3.11): C extensions are per version.
py=${PYTHON:-}
if [ -z "$py" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      py=$candidate; break
    fi
  done
fi
[ -n "$py" ] || { log "needs a Python 3.11 with pip on the host (set PYTHON=...), the image's version"; exit 1; }

version=$("$py" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
# The variant with extras is tagged after them (0.1.0-embeddings): the operator's KORA_EMBEDDINGS_IMAGE default.
tag=${tag:-$version${extras:+-${extras//,/-}}}
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)

# --- what the image is made of ----------------------------------------------------------------------------
suite=bookworm
packages=python3,python3-venv,ca-certificates,libnss-wrapper,libstdc++6
uid=65532
venv=/opt/kora/venv
home=/home/kora
# Security updates included: the image's openssl and python3.11 are the patched ones.
mirrors=(
  "deb http://deb.debian.org/debian $suite main"
  "deb http://deb.debian.org/debian $suite-updates main"
  "deb http://deb.debian.org/debian-security $suite-security main"
)
# Documentation, manuals and translations are never installed (licences, /usr/share/doc/*/copyright, are).
dpkg_excludes=(
  'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' 'path-exclude=/usr/share/locale/*'
  'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright' 'path-exclude=/usr/share/lintian/*'
)

cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/kora/image
key=$( (cat "$script" scripts/image/requirements.py constraints.txt pyproject.toml; echo "extras=$extras bytecode=$bytecode") | sha256sum | cut -c1-16)
cache=$cache_root/$key
work=$(mktemp -d "${TMPDIR:-/tmp}/kora-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$cache_root"

# Runs a command inside a root filesystem with /proc and /dev mounted in a private mount namespace (gone when
# it ends, so nothing is left mounted and no device node lands in a layer), with a clean environment.
in_root() {
  local root=$1; shift
  unshare --mount --fork -- sh -ec '
    root=$1; shift
    mount -t proc proc "$root/proc"
    mount --rbind /dev "$root/dev"
    exec chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
      PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 "$@"
  ' in_root "$root" "$@"
}

# Removes what a running Kora never reads: apt's lists and caches, logs, pip's cache, the build's temporary
# files, device nodes (a runtime provides /dev); with --no-bytecode, the compiled bytecode too (Debian's
# py3compile and pip write it at install time; with it gone, Python compiles in memory at every start).
strip_root() {
  local root=$1
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
    "$root"/var/log/* "$root"/root/.cache "$root"/tmp/* "$root"/tmp/.[!.]* "$root"/dev/*
  if [ "$bytecode" = no ]; then
    find "$root/usr/lib/python3" "$root/usr/lib/python3.11" "$root/opt" -depth -name __pycache__ -type d \
      -exec rm -rf {} + 2>/dev/null || true
  fi
}

# --- the wheels -------------------------------------------------------------------------------------------
# Kora's wheel, built from a copy of the sources so the checkout gets no build/ or *.egg-info.
mkdir -p "$work/src" "$work/wheels"
tar -C "$repo" --exclude=__pycache__ -cf - pyproject.toml README.md kora | tar -C "$work/src" -xf -
"$py" -m pip wheel -q --no-deps -w "$work/wheels" "$work/src" >&2
wheel=$(ls "$work"/wheels/kora-*.whl)
wheel_name=$(basename "$wheel")
log "built $wheel_name"

# --- layers 1 and 2, cached: Debian and the dependencies ---------------------------------------------------
exec 9>"$cache_root/.lock"
flock 9
if [ ! -f "$cache/.complete" ]; then
  started=$SECONDS
  rm -rf "$cache" && mkdir -p "$cache"
  log "no cached base for $key: building Debian $suite ($packages) and the dependencies"
  # The wheelhouse: every pinned dependency as a wheel, fetched by the host's pip from its configured indexes.
  requirement=$wheel${extras:+[$extras]}
  "$py" -m pip wheel -q -c constraints.txt -w "$cache/wheelhouse" "$requirement" >&2
  rm -f "$cache/wheelhouse/$wheel_name"

  umoci init --layout "$work/layout"
  umoci new --image "$work/layout:base"
  umoci unpack --image "$work/layout:base" "$work/bundle" >/dev/null
  rootfs=$work/bundle/rootfs
  chmod 0755 "$work/bundle"   # apt downloads as user _apt, which must reach the target directory
  mmdebstrap --mode=root --variant=essential --include="$packages" --format=directory \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    "${dpkg_excludes[@]/#/--dpkgopt=}" --aptopt='Acquire::Retries "3"' \
    "$suite" "$rootfs" "${mirrors[@]}" 2>&1 | grep -E '^(E|W):|success' >&2 || true
  [ -x "$rootfs/usr/bin/python3" ] || { log "mmdebstrap did not produce a root filesystem"; exit 1; }
  # The image's default user. Any other non-root uid works as well (a cluster's, OpenShift's random one): the
  # embedded Postgres gives a uid without a name one through libnss-wrapper (kora.memory_service.passwd).
  echo "kora:x:$uid:$uid:Kora:$home:/usr/sbin/nologin" >> "$rootfs/etc/passwd"
  echo "kora:x:$uid:" >> "$rootfs/etc/group"
  install -d -o "$uid" -g "$uid" -m 0755 "$rootfs$home"
  strip_root "$rootfs"
  umoci repack --refresh-bundle --image "$work/layout:base" \
    --history.created_by "mmdebstrap --variant=essential --include=$packages $suite" "$work/bundle" >/dev/null
  log "layer 1 (Debian $suite) in $((SECONDS - started)) s"

  cp -al "$cache/wheelhouse" "$rootfs/tmp/wheelhouse" 2>/dev/null || cp -a "$cache/wheelhouse" "$rootfs/tmp/wheelhouse"
  cp constraints.txt pyproject.toml scripts/image/requirements.py "$rootfs/tmp/"
  # The dependencies only (the Dockerfile does the same): Kora gets a layer of its own.
  in_root "$rootfs" sh -ec "
    python3 -m venv $venv
    python3 /tmp/requirements.py /tmp/pyproject.toml '$extras' > /tmp/requirements.txt
    $venv/bin/pip install -q --no-index --find-links /tmp/wheelhouse -c /tmp/constraints.txt -r /tmp/requirements.txt
  " >&2
  strip_root "$rootfs"
  umoci repack --refresh-bundle --image "$work/layout:base" \
    --history.created_by "pip install -c constraints.txt -r requirements.txt (Kora's dependencies${extras:+ with $extras})" \
    "$work/bundle" >/dev/null
  umoci gc --layout "$work/layout"
  rm -rf "$cache/wheelhouse"
  mv "$work/layout" "$cache/layout"
  rm -rf "$work/bundle"
  touch "$cache/.complete"
  log "layers 1 and 2 built and cached in $((SECONDS - started)) s: $cache"
  # Only the newest base is kept: each is a few hundred MB.
  find "$cache_root" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -exec rm -rf {} +
else
  log "reusing the cached Debian and dependency layers ($cache)"
fi

# --- layer 3: Kora, and the image's configuration -----------------------------------------------------------
started=$SECONDS
cp -a "$cache/layout" "$work/layout"
flock -u 9
umoci unpack --image "$work/layout:base" "$work/bundle" >/dev/null
rootfs=$work/bundle/rootfs
cp "$wheel" "$rootfs/tmp/"
in_root "$rootfs" sh -ec "
  $venv/bin/pip install -q --no-index --no-deps '/tmp/$wheel_name'
  $venv/bin/pip check
  $venv/bin/kora --version
" >&2
strip_root "$rootfs"
umoci repack --image "$work/layout:base" --history.created_by "pip install --no-deps $wheel_name" \
  "$work/bundle" >/dev/null
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
config=(
  --config.user "$uid:$uid" --config.workingdir "$home"
  --config.entrypoint kora --config.cmd agent --config.exposedports 8000/tcp
  --config.env "PATH=$venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  --config.env PYTHONDONTWRITEBYTECODE=1 --config.env PYTHONUNBUFFERED=1 --config.env LANG=C.UTF-8
  --config.label "org.opencontainers.image.title=kora"
  --config.label "org.opencontainers.image.description=Kora: agent, mcp, memory, model-proxy, model and operator workloads (entrypoint kora)"
  --config.label "org.opencontainers.image.version=$version"
  --config.label "org.opencontainers.image.revision=$revision"
  --config.label "org.opencontainers.image.licenses=Apache-2.0"
  --config.label "org.opencontainers.image.created=$created"
  --config.label "org.opencontainers.image.base.name=debian:$suite (mmdebstrap)"
  --config.label "io.kora.extras=${extras:-none}"
  --created "$created" --author kora
)
umoci config --image "$work/layout:base" --tag "$tag" "${config[@]}" --history.created_by "image configuration"
umoci rm --image "$work/layout:base"
umoci gc --layout "$work/layout"

# --- results ----------------------------------------------------------------------------------------------
rm -rf "$out" && mkdir -p "$out"
archive=$out/kora-$tag.oci.tar
# An OCI image archive is the layout directory as a tar (what `skopeo copy oci-archive:` reads).
tar -C "$work/layout" -cf "$archive" .
# The root filesystem the checks chroot into, unpacked from the archive's own layout: what a runtime would run.
umoci unpack --image "$work/layout:$tag" "$work/final" >/dev/null
mv "$work/final/rootfs" "$out/rootfs"
cp "$work/final/config.json" "$out/runtime-config.json"
log "layer 3 (Kora) and the archive in $((SECONDS - started)) s"

archive_bytes=$(stat -c %s "$archive")
rootfs_bytes=$(du -sb "$out/rootfs" | cut -f1)
venv_bytes=$(du -sb "$out/rootfs$venv" | cut -f1)
{
  echo "archive $archive_bytes $(basename "$archive")"
  echo "rootfs $rootfs_bytes rootfs"
  echo "venv $venv_bytes rootfs$venv"
} > "$out/sizes.txt"
log "$(basename "$archive"): $((archive_bytes / 1048576)) MiB compressed; rootfs $((rootfs_bytes / 1048576)) MiB unpacked (of which $venv $((venv_bytes / 1048576)) MiB)"
if [ -n "${KORA_IMAGE_OWNER:-}" ]; then
  chown "$KORA_IMAGE_OWNER" "$out" "$archive" "$out/sizes.txt" "$out/runtime-config.json"
fi
echo "$archive"
