#!/usr/bin/env bash
# Installs the `openai` npm package (the official TypeScript/JavaScript SDK) that the Node client tests run
# against an agent's /v1, and prints its node_modules directory (the only stdout line). Cached under
# ${XDG_CACHE_HOME:-~/.cache}/kora/openai-node-<version>; a second call only checks the installed version.
#
# Version 6.30.1: the last major line for Node 20 (7.x wants a newer Node). It has no dependencies; npm checks the
# tarball against the sha512 integrity pinned in package-lock.json below. Needs node and npm on PATH.
# Environment: KORA_OPENAI_NODE_HOME overrides the cache directory; NPM_REGISTRY the registry (a mirror).
set -euo pipefail

version=6.30.1
integrity=sha512-5bkK9GoQMd8j4a0TeY95AIC7FtGP38HlfO+YvRq4TkEndHLI1iR8ct9wajmsAMw+G/QcPOZnqzhhsUT2GKUWkA==
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../lib/npm-tree.sh
. "$here/../lib/npm-tree.sh"

# The package has no dependencies, so its lock file is written here rather than kept beside the script.
write_lock() {
  cat > "$1/package.json" <<JSON
{"name": "kora-openai-node-tests", "private": true, "dependencies": {"openai": "$version"}}
JSON
  cat > "$1/package-lock.json" <<JSON
{
  "name": "kora-openai-node-tests", "lockfileVersion": 3, "requires": true,
  "packages": {
    "": {"name": "kora-openai-node-tests", "dependencies": {"openai": "$version"}},
    "node_modules/openai": {
      "version": "$version",
      "resolved": "${NPM_REGISTRY:-https://registry.npmjs.org}/openai/-/openai-$version.tgz",
      "integrity": "$integrity"
    }
  }
}
JSON
}
install_npm_tree install-openai-node openai "$version" \
  "${KORA_OPENAI_NODE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/kora/openai-node-$version}" write_lock
