#!/usr/bin/env bash
# README's first command: install, then `kora up examples/quickstart` (model, inline-tool MCP server and agent
# as local processes behind a gateway on 127.0.0.1:8080) and hold a short conversation in which the agent
# calls a tool. Everything keeps running until Ctrl-C.
#
# Offline by default: the example's ModelAPI is Kora's *scripted* model. For a real OpenAI-compatible model:
#   MODEL_API_URL=https://api.openai.com/v1 MODEL_NAME=gpt-4o-mini MODEL_API_KEY=sk-... bash scripts/quickstart.sh
# The key goes to kora up from the environment (--secret-env model-api/api-key=MODEL_API_KEY): no file holds it.
#
#   bash scripts/quickstart.sh [--port N]    gateway port, default 8080 (or KORA_GATEWAY_PORT=N)
#
# State and logs go to .kora/quickstart (KORA_STATE_DIR to change), where bare `kora status | logs | chat |
# down` find them. Exits 1, saying why, when its own `kora up` did not start (port taken, one already
# running with that state dir) or its agent did not become ready.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${KORA_GATEWAY_PORT:-8080}
while [ $# -gt 0 ]; do
  case "$1" in
    --port) PORT=${2:?--port needs a number}; shift 2 ;;
    --port=*) PORT=${1#--port=}; shift ;;
    *) echo "usage: bash scripts/quickstart.sh [--port N]" >&2; exit 2 ;;
  esac
done
bash scripts/bootstrap.sh
. .venv/bin/activate
STATE=${KORA_STATE_DIR:-.kora/quickstart}
mkdir -p "$STATE"
manifests=examples/quickstart
secrets=()
if [ -n "${MODEL_API_URL:-}" ]; then
  : "${MODEL_NAME:?set MODEL_NAME too: the model the endpoint at MODEL_API_URL serves}"
  # The manifests reference the key (Secret model-api, key api-key); kora up reads it from MODEL_API_KEY, so
  # it is never written to a file.
  python scripts/quickstart/real_model.py examples/quickstart/kora.yaml "$STATE/kora.yaml"
  manifests="$STATE/kora.yaml"
  if [ -n "${MODEL_API_KEY:-}" ]; then secrets=(--secret-env model-api/api-key=MODEL_API_KEY); fi
  echo "Using the real model '$MODEL_NAME' at $MODEL_API_URL."
else
  echo "Offline: the model is Kora's SCRIPTED model (set MODEL_API_URL and MODEL_NAME to use a real one)."
fi
kora up "$manifests" --port "$PORT" --state-dir "$STATE" ${secrets[@]+"${secrets[@]}"} &
up=$!
trap 'kill -TERM $up 2>/dev/null || true; wait $up 2>/dev/null || true' EXIT INT TERM
agent="http://127.0.0.1:$PORT/default/agent/assistant"
# Ready means: the state file is this kora up's own (not another's answering on the same port) and every
# workload is Ready. kora up's own messages (a taken port, one already running) are on the screen above.
if ! python scripts/quickstart/wait_ready.py "$STATE" "$up"; then
  status=0
  kill -0 "$up" 2>/dev/null || wait "$up" || status=$?
  if [ "$status" -ne 0 ]; then
    echo "quickstart: kora up did not start (exit code $status; its message is above)." >&2
    echo "  Port $PORT taken? Choose another: bash scripts/quickstart.sh --port 8181 (or KORA_GATEWAY_PORT)." >&2
    echo "  Already running? Stop it with: kora down --state-dir $STATE" >&2
  else
    echo "quickstart: the workloads did not become ready; their logs: kora logs <name> --state-dir $STATE" >&2
    echo "  (files in $STATE/logs/)" >&2
  fi
  exit 1
fi
KORA_AGENT_URL="$agent" python scripts/quickstart/demo.py || {
  echo "  The workloads' state: kora status; their logs: kora logs <name> (files in $STATE/logs/)." >&2
  exit 1
}
cat <<MSG

The agent answers through the gateway at $agent (OpenAI-compatible: $agent/v1). Try:
  kora chat assistant     (in another terminal, after '. .venv/bin/activate'; also kora status, kora logs assistant)
Press Ctrl-C to stop everything.
MSG
if [ -n "${KORA_QUICKSTART_EXIT:-}" ]; then exit 0; fi
wait $up
