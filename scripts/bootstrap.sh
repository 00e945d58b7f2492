#!/usr/bin/env bash
# Creates .venv (if missing) and installs Kora with its exact pins. Idempotent; used by the README's
# two commands and by CI. Needs only python3 (>= 3.11) with venv and pip.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.kora-installed
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints.txt -e ".[dev]"
  echo "$want" > "$stamp"
fi
