#!/usr/bin/env bash
# The whole test suite: lint, type check, then every test (slow end-to-end ones included).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
. .venv/bin/activate
ruff check .
ruff format --check .
mypy kora
lint-imports --no-cache
exec pytest "$@"
