#!/usr/bin/env bash
# README's first command: install, then `kora up examples/quickstart` (model, inline-tool MCP server and agent
# as local processes behind a gateway on 127.0.0.1:8080) and hold a short conversation in which the agent
# calls a tool. Everything keeps running until Ctrl-C.
#
# Offline by default: the example's ModelAPI is Kora's *scripted* model. For a real OpenAI-compatible model:
#   MODEL_API_URL=https://api.openai.com/v1 MODEL_NAME=gpt-4o-mini MODEL_API_KEY=sk-... bash scripts/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
. .venv/bin/activate
PORT=${KORA_GATEWAY_PORT:-8080}
STATE=${KORA_STATE_DIR:-.kora/quickstart}
mkdir -p "$STATE"
manifests=examples/quickstart
if [ -n "${MODEL_API_URL:-}" ]; then
  : "${MODEL_NAME:?set MODEL_NAME too: the model the endpoint at MODEL_API_URL serves}"
  python scripts/quickstart/real_model.py examples/quickstart/kora.yaml "$STATE/kora.yaml"
  manifests="$STATE/kora.yaml"
  echo "Using the real model '$MODEL_NAME' at $MODEL_API_URL."
else
  echo "Offline: the model is Kora's SCRIPTED model (set MODEL_API_URL and MODEL_NAME to use a real one)."
fi
kora up "$manifests" --port "$PORT" --state-dir "$STATE" &
up=$!
trap 'kill -TERM $up 2>/dev/null || true; wait $up 2>/dev/null || true' EXIT INT TERM
agent="http://127.0.0.1:$PORT/default/agent/assistant"
python - "$agent/ready" "$up" <<'PY' || { echo "the agent did not become ready; see kora logs" >&2; exit 1; }
import os, sys, time, urllib.request
for _ in range(600):
    try:
        os.kill(int(sys.argv[2]), 0)  # kora up still running?
    except OSError:
        sys.exit(1)
    try:
        urllib.request.urlopen(sys.argv[1], timeout=1)
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
PY
KORA_AGENT_URL="$agent" python scripts/quickstart/demo.py
cat <<MSG

The agent answers through the gateway at $agent (OpenAI-compatible: $agent/v1). Try:
  kora chat assistant --state-dir $STATE     (in another terminal, after '. .venv/bin/activate')
Press Ctrl-C to stop everything.
MSG
if [ -n "${KORA_QUICKSTART_EXIT:-}" ]; then exit 0; fi
wait $up
