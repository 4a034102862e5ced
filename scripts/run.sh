#!/usr/bin/env bash
# `make run`: Redis, the local model server (the embedded default upstream) and the proxy, on
# this machine, in the foreground; Ctrl-C stops all three.
#
#   DEJA_UPSTREAM_URL=https://api.openai.com/v1 make run   # another upstream: no model server
#   DEJA_PORT=8080 DEJA_MODEL_PORT=8081 DEJA_REDIS_PORT=6390 (defaults shown)
#   SEMANTIC_MODEL=mpnet|two-stage|e5-small|minilm   # the embedding model (make installs mpnet)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
PORT=${DEJA_PORT:-8080}
MODEL_PORT=${DEJA_MODEL_PORT:-8081}
REDIS_PORT=${DEJA_REDIS_PORT:-6390}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
case "${SEMANTIC_MODEL:-}" in
  "") ;;  # config/deja.yaml's (or DEJA_SEMANTIC__MODEL's)
  two-stage) export DEJA_SEMANTIC__MODEL=minilm DEJA_SEMANTIC__RESCORE_MODEL=mpnet ;;
  *) export DEJA_SEMANTIC__MODEL="$SEMANTIC_MODEL" ;;
esac
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

wait_for() { # url seconds what
  local deadline=$((SECONDS + $2))
  until curl -fsS -o /dev/null "$1" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then echo "$3 did not become ready at $1" >&2; exit 1; fi
    sleep 0.5
  done
}

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --loglevel warning &
pids+=($!)

if [ -z "${DEJA_UPSTREAM_URL:-}" ]; then
  echo "starting the local model server (SmolLM2-135M-Instruct) on 127.0.0.1:$MODEL_PORT ..."
  $BIN/deja modelserver --host 127.0.0.1 --port "$MODEL_PORT" &
  pids+=($!)
  wait_for "http://127.0.0.1:$MODEL_PORT/readyz" 600 "the model server"
  export DEJA_UPSTREAM_URL="http://127.0.0.1:$MODEL_PORT/v1"
fi

$BIN/deja serve --config config/deja.yaml --port "$PORT" --redis "redis://127.0.0.1:$REDIS_PORT/0" &
pids+=($!)
wait_for "http://127.0.0.1:$PORT/healthz" 120 "the proxy"

cat <<EOF

Deja is serving on http://127.0.0.1:$PORT/v1 (upstream: $DEJA_UPSTREAM_URL)
Point any OpenAI client at it:

  from openai import OpenAI
  client = OpenAI(base_url="http://127.0.0.1:$PORT/v1", api_key="any-key")
  client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Hi!"}])

  curl -s http://127.0.0.1:$PORT/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "smollm2", "messages": [{"role": "user", "content": "What is a cache?"}]}' -D - 

Ctrl-C stops everything.
EOF
wait -n "${pids[@]}"
