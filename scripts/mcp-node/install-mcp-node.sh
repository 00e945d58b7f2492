#!/usr/bin/env bash
# Installs the official MCP TypeScript SDK (`@modelcontextprotocol/sdk`) that the Node client test runs against
# `kora mcp`, and prints its node_modules directory (the only stdout line). Cached under
# ${XDG_CACHE_HOME:-~/.cache}/kora/mcp-node-<version>; a second call only checks the installed version.
#
# Version 1.32.2 (Node >= 18; its newest protocol revision is 2025-11-25). npm installs exactly the tree in
# package-lock.json beside this script, each tarball checked against its sha512 integrity. Needs node and npm on
# PATH. Environment: KORA_MCP_NODE_HOME overrides the cache directory.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
version=1.32.2
home=${KORA_MCP_NODE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/kora/mcp-node-$version}
log() { echo "install-mcp-node: $*" >&2; }

installed() {
  node -e "process.stdout.write(require('$home/node_modules/@modelcontextprotocol/sdk/package.json').version)" 2>/dev/null
}

if [ "$(installed || true)" = "$version" ]; then
  echo "$home/node_modules"
  exit 0
fi
command -v npm >/dev/null || { log "npm is not on PATH"; exit 1; }
mkdir -p "$home"
cp "$here/package.json" "$here/package-lock.json" "$home/"
log "installing @modelcontextprotocol/sdk@$version into $home"
(cd "$home" && npm ci --no-audit --no-fund --ignore-scripts --silent >&2)
[ "$(installed)" = "$version" ] || { log "@modelcontextprotocol/sdk@$version did not install"; exit 1; }
echo "$home/node_modules"
