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
# shellcheck source=../lib/npm-tree.sh
. "$here/../lib/npm-tree.sh"
version=1.32.2
copy_lock() { cp "$here/package.json" "$here/package-lock.json" "$1/"; }
install_npm_tree install-mcp-node @modelcontextprotocol/sdk "$version" \
  "${KORA_MCP_NODE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/kora/mcp-node-$version}" copy_lock
