#!/usr/bin/env bash
# Installs the AG-UI protocol's own TypeScript client (`@ag-ui/client`, its `HttpAgent`) that the Node client test
# runs against an agent's POST /ag-ui, and prints its node_modules directory (the only stdout line). Cached under
# ${XDG_CACHE_HOME:-~/.cache}/kora/ag-ui-node-<version>; a second call only checks the installed version.
#
# Version 1.0.0 (AG-UI 1.0; runs on Node 20). npm installs exactly the tree in package-lock.json beside this script,
# each tarball checked against its sha512 integrity. Needs node and npm on PATH. Environment: KORA_AG_UI_NODE_HOME
# overrides the cache directory.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
version=1.0.0
home=${KORA_AG_UI_NODE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/kora/ag-ui-node-$version}
log() { echo "install-ag-ui-node: $*" >&2; }

installed() {
  node -e "process.stdout.write(require('$home/node_modules/@ag-ui/client/package.json').version)" 2>/dev/null
}

if [ "$(installed || true)" = "$version" ]; then
  echo "$home/node_modules"
  exit 0
fi
command -v npm >/dev/null || { log "npm is not on PATH"; exit 1; }
mkdir -p "$home"
cp "$here/package.json" "$here/package-lock.json" "$home/"
log "installing @ag-ui/client@$version into $home"
(cd "$home" && npm ci --no-audit --no-fund --ignore-scripts --silent >&2)
[ "$(installed)" = "$version" ] || { log "@ag-ui/client@$version did not install"; exit 1; }
echo "$home/node_modules"
