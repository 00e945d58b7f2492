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
# shellcheck source=../lib/npm-tree.sh
. "$here/../lib/npm-tree.sh"
version=1.0.0
copy_lock() { cp "$here/package.json" "$here/package-lock.json" "$1/"; }
install_npm_tree install-ag-ui-node @ag-ui/client "$version" \
  "${KORA_AG_UI_NODE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/kora/ag-ui-node-$version}" copy_lock
