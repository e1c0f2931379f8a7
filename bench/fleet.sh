#!/usr/bin/env bash
# Measures cache-aware routing against least_outstanding on loopback, in one
# run: the agent workload (bench/fleetload: sessions at once, each with its
# own long system prompt and a growing history) through a gateway with one
# model over several engine replicas, once per balancing, and a control
# workload whose every request has a fresh prompt (nothing to share).
#
# Usage:
#   bench/fleet.sh sim    # 4 simulated vLLM replicas (llmgate sim with a prefix cache)
#   bench/fleet.sh llama  # 2 llama-server replicas ($LLMGATE_TEST_LLAMA_SERVER, $LLMGATE_TEST_LLAMA_MODEL;
#                         #   eval "$(test/real-engine/setup.sh)" sets them)
# Environment: SESSIONS, TURNS, SYSTEM_WORDS, TOOL_WORDS, MAX_TOKENS, THINK (pause before a
# turn, uniform up to it: the agent's tools running), KV_TOKENS (sim),
# BALANCINGS (default "least_outstanding cache_aware"; a name may repeat), WORKLOADS (default
# "agent unique"), SIM_FLAGS (more llmgate sim flags), GW_YAML (lines added to the gateway's
# config, e.g. "routing:\n  load_factor: 2"), DRIVER=bench (llmgate bench --workload agent
# instead of bench/fleetload: no pause between turns).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-sim}
dir=$(mktemp -d /tmp/llmgate-fleet.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
go build -o "$dir/llmgate" ./cmd/llmgate
go build -o "$dir/fleetload" ./bench/fleetload
key=sk-lg-fleet-bench-master-key-0000000000
gwport=18190

waitup() { # url
  for _ in $(seq 1 600); do
    if curl -fs -o /dev/null "$1"; then return 0; fi
    sleep 0.1
  done
  echo "not up: $1" >&2; return 1
}

case "$mode" in
sim)
  n=4
  SESSIONS=${SESSIONS:-16} TURNS=${TURNS:-6} SYSTEM_WORDS=${SYSTEM_WORDS:-3000} TOOL_WORDS=${TOOL_WORDS:-150} MAX_TOKENS=${MAX_TOKENS:-16}
  # 16 sessions x ~5-6k tokens of prompt (3,000 words and the history):
  # ~90k tokens in all; a replica's 32k hold its running requests and
  # about 5 sessions' prefixes, not all 16.
  KV_TOKENS=${KV_TOKENS:-32768} SIM_MODEL=${SIM_MODEL:-qwen2.5-7b-instruct}
  kvflag=()
  if "$dir/llmgate" sim --help 2>&1 | grep -q -- --kv-cache-tokens; then
    kvflag=(--kv-cache-tokens "$KV_TOKENS" --max-model-len 16384)
  else
    echo "# this llmgate sim has no prefix cache (--kv-cache-tokens): cached shares will be 0" >&2
  fi
  start_engines() {
    for i in $(seq 0 $((n - 1))); do
      "$dir/llmgate" sim --model "$SIM_MODEL" --listen 127.0.0.1:$((18180 + i)) "${kvflag[@]}" ${SIM_FLAGS:-} >"$dir/engine-$i.log" 2>&1 &
      pids+=($!)
    done
    for i in $(seq 0 $((n - 1))); do waitup "http://127.0.0.1:$((18180 + i))/v1/models"; done
  }
  stop_engines() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
  engine=vllm upstream=$SIM_MODEL
  ;;
llama)
  n=2
  : "${LLMGATE_TEST_LLAMA_SERVER:?set it: eval \"\$(test/real-engine/setup.sh)\"}"
  # llama-server caps a slot at the model's training context (2048 for
  # the test model): prompts must stay below it.
  SESSIONS=${SESSIONS:-8} TURNS=${TURNS:-6} SYSTEM_WORDS=${SYSTEM_WORDS:-700} TOOL_WORDS=${TOOL_WORDS:-50} MAX_TOKENS=${MAX_TOKENS:-16}
  start_engines() {
    for i in $(seq 0 $((n - 1))); do
      "$LLMGATE_TEST_LLAMA_SERVER" -m "$LLMGATE_TEST_LLAMA_MODEL" -c 8192 --metrics -t 1 --host 127.0.0.1 --port $((18180 + i)) >"$dir/engine-$i.log" 2>&1 &
      pids+=($!)
    done
    for i in $(seq 0 $((n - 1))); do waitup "http://127.0.0.1:$((18180 + i))/health"; done
  }
  stop_engines() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
  engine=llamacpp upstream=$(basename "$LLMGATE_TEST_LLAMA_MODEL" .gguf)
  ;;
*) echo "usage: $0 sim|llama" >&2; exit 2 ;;
esac

run() { # balancing workload-label fleetload-flags...
  local bal=$1 label=$2; shift 2
  start_engines
  {
    echo "listen: 127.0.0.1:$gwport"
    echo "database: $dir/gw-$bal-$label.db"
    echo "spool_dir: $dir/spool-$bal-$label"
    echo "backends:"
    for i in $(seq 0 $((n - 1))); do echo "  r$i: {url: http://127.0.0.1:$((18180 + i))/v1, engine: $engine}"; done
    echo "models:"
    echo "  m:"
    echo "    upstream_model: $upstream"
    echo "    balancing: $bal"
    echo "    deployments:"
    for i in $(seq 0 $((n - 1))); do echo "      - {backend: r$i}"; done
    if [ -n "${GW_YAML:-}" ]; then printf '%b\n' "$GW_YAML"; fi
  } >"$dir/gw-$bal.yaml"
  LLMGATE_MASTER_KEY=$key "$dir/llmgate" serve -c "$dir/gw-$bal.yaml" >"$dir/gw-$bal-$label.log" 2>&1 &
  local gw=$!
  pids+=($gw)
  waitup "http://127.0.0.1:$gwport/healthz"
  if [ "${DRIVER:-fleetload}" = bench ]; then
    # llmgate bench's agent workload (no pause between turns).
    local shared=true
    if [ "$label" = unique ]; then shared=false; fi
    echo "## $mode $bal $label (llmgate bench --workload agent)"
    "$dir/llmgate" bench --base-url "http://127.0.0.1:$gwport/v1" --api-key "$key" --model m --workload agent \
      --sessions "$SESSIONS" --turns "$TURNS" --system-prompt-words "$SYSTEM_WORDS" --tool-result-words "$TOOL_WORDS" \
      --shared-prefix="$shared" --out "$dir/bench-$bal-$label" 2>&1 | grep -iE "ttft|cached|throughput|req/s|requests" | head -12
  else
    "$dir/fleetload" -url "http://127.0.0.1:$gwport/v1" -key "$key" -model m -label "$mode $bal $label" \
      -sessions "$SESSIONS" -turns "$TURNS" -system-words "$SYSTEM_WORDS" -tool-words "$TOOL_WORDS" -max-tokens "$MAX_TOKENS" -think "${THINK:-1s}" "$@"
  fi
  kill "$gw"; wait "$gw" 2>/dev/null || true
  stop_engines
}

echo "# $mode: $n replicas, $SESSIONS sessions x $TURNS turns, ${SYSTEM_WORDS}-word system prompts, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
for w in ${WORKLOADS:-agent unique}; do
  flags=()
  if [ "$w" = unique ]; then flags=(-unique); fi
  for bal in ${BALANCINGS:-least_outstanding cache_aware}; do
    run "$bal" "$w" "${flags[@]}"
  done
done
echo "# logs in $dir"
