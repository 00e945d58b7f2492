# Sourced by the Node client installers (scripts/*-node/install-*-node.sh).
#
#   install_npm_tree NAME PACKAGE VERSION HOME PREPARE
#
# Makes sure npm package PACKAGE at exactly VERSION is installed under HOME/node_modules and prints that directory
# (the only stdout line; NAME prefixes the log lines on stderr). A tree already at VERSION is only checked. Otherwise
# the function PREPARE is called with HOME to put package.json and package-lock.json there, and `npm ci` installs
# exactly that lock's tree, each tarball checked against its sha512 integrity, install scripts off. Returns 1, saying
# why, when npm is not on PATH or the installed version is not VERSION afterwards.
install_npm_tree() {
  local name=$1 package=$2 version=$3 home=$4 prepare=$5
  if [ "$(_npm_tree_version "$home" "$package" || true)" = "$version" ]; then
    echo "$home/node_modules"
    return 0
  fi
  command -v npm >/dev/null || { echo "$name: npm is not on PATH" >&2; return 1; }
  mkdir -p "$home"
  "$prepare" "$home"
  echo "$name: installing $package@$version into $home" >&2
  (cd "$home" && npm ci --no-audit --no-fund --ignore-scripts --silent >&2)
  [ "$(_npm_tree_version "$home" "$package")" = "$version" ] \
    || { echo "$name: $package@$version did not install" >&2; return 1; }
  echo "$home/node_modules"
}

# The version of PACKAGE installed under HOME/node_modules (nothing, and status 1, when there is none).
_npm_tree_version() {
  node -e "process.stdout.write(require('$1/node_modules/$2/package.json').version)" 2>/dev/null
}
