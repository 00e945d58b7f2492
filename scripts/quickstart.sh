#!/usr/bin/env bash
# README's first command: install, then run an agent with an inline-tool MCP server and hold a short
# conversation in which the agent calls a tool. The agent keeps serving on http://127.0.0.1:8000 until Ctrl-C.
#
# Offline by default: the model is Kora's *scripted* model. For a real one, set an OpenAI-compatible endpoint:
#   MODEL_API_URL=https://api.openai.com/v1 MODEL_NAME=gpt-4o-mini MODEL_API_KEY=sk-... bash scripts/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
. .venv/bin/activate
AGENT_PORT=${AGENT_PORT:-8000} MODEL_PORT=${KORA_MODEL_PORT:-8100} TOOLS_PORT=${KORA_TOOLS_PORT:-8101}
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
wait_ready() {  # python, not curl: a fresh machine may have no curl
  python - "$1" <<'PY' || { echo "no answer from $1" >&2; exit 1; }
import sys, time, urllib.request
for _ in range(300):
    try:
        urllib.request.urlopen(sys.argv[1], timeout=1)
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
PY
}

kora mcp --host 127.0.0.1 --port "$TOOLS_PORT" --tools-file scripts/quickstart/tools.py &
pids+=($!)
if [ -z "${MODEL_API_URL:-}" ]; then
  echo "Offline: using Kora's SCRIPTED model (set MODEL_API_URL and MODEL_NAME to use a real one)."
  kora model --host 127.0.0.1 --port "$MODEL_PORT" --script scripts/quickstart/model-script.yaml --model-name scripted &
  pids+=($!)
  export MODEL_API_URL=http://127.0.0.1:$MODEL_PORT/v1 MODEL_NAME=scripted
  wait_ready "http://127.0.0.1:$MODEL_PORT/health"
fi
export AGENT_NAME=quickstart AGENT_HOST=127.0.0.1 AGENT_PORT MCP_SERVERS=tools MCP_SERVER_TOOLS_URL=http://127.0.0.1:$TOOLS_PORT
export AGENT_INSTRUCTIONS="${AGENT_INSTRUCTIONS:-You are a helpful assistant. Use the add tool for arithmetic and utc_time for the time.}"
kora agent &
pids+=($!)
wait_ready "http://127.0.0.1:$AGENT_PORT/ready"
KORA_AGENT_URL="http://127.0.0.1:$AGENT_PORT" python scripts/quickstart/demo.py
cat <<MSG

The agent is serving on http://127.0.0.1:$AGENT_PORT (OpenAI-compatible: /v1/chat/completions). Try:
  curl -s http://127.0.0.1:$AGENT_PORT/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model":"quickstart","messages":[{"role":"user","content":"what is 40 plus 2?"}]}'
Press Ctrl-C to stop.
MSG
if [ -n "${KORA_QUICKSTART_EXIT:-}" ]; then exit 0; fi
wait
