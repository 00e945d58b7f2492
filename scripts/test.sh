#!/usr/bin/env bash
# The whole test suite: lint, type check, then every test (slow end-to-end ones included).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
# The embeddings extra (ModelAPI Hosted mode's model) is installed so its tests run; they must not be skipped.
bash scripts/bootstrap.sh embeddings
. .venv/bin/activate
export KORA_REQUIRE_EMBEDDINGS=1
ruff check .
ruff format --check .
mypy kora
lint-imports --no-cache
exec pytest "$@"
