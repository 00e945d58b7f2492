#!/usr/bin/env bash
# Installs the browser the console's browser tests drive: Debian's Chromium (/usr/bin/chromium), with apt, once
# per machine. Playwright (the Python package, in the dev extra) is pointed at it with executable_path, so
# `playwright install` (a browser download, impossible offline) is never needed. Idempotent: a machine that has
# it finds nothing to do. Needs root, or sudo without a password.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
as_root=()
if [ "$(id -u)" != 0 ]; then
  as_root=(sudo -n)
fi
echo "bootstrap-browser: installing Debian's chromium with apt-get (once per machine) ..." >&2
"${as_root[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null
echo "bootstrap-browser: $(/usr/bin/chromium --version 2>/dev/null || echo 'chromium installed')" >&2
