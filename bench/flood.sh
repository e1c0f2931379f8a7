#!/usr/bin/env bash
# The flood of issue 26 on loopback: one simulated engine that runs 4
# sequences at once (llmgate sim --max-num-seqs 4) behind llmgate; key A
# keeps 48 streaming requests in flight, key B sends small streaming
# requests one at a time. Measured without the fair queue (the engine's
# FIFO decides), with it (the deployment's max_concurrency: 4) and with a
# slot kept for quiet keys (queue_reserve: 1): B's mean
# TTFT alone and under the flood, and A's output throughput alone.
# Usage: bench/flood.sh            (FLOOD_TOKENS=200 QUIET=10 WINDOW=15s by default)
#        FLOOD_TOKENS=16 QUIET=20 bench/flood.sh
#        A_ROUNDS=3 bench/flood.sh  (A alone only, without and with the queue in turns)
set -euo pipefail
cd "$(dirname "$0")/.."
FLOOD=${FLOOD:-48}
FLOOD_TOKENS=${FLOOD_TOKENS:-200}
QUIET=${QUIET:-10}
WINDOW=${WINDOW:-15s}
MAX_CONC=${MAX_CONC:-4}   # the fair queue's max_concurrency
RESERVE=${RESERVE:-1}     # reserve: max_concurrency $MAX_CONC with queue_reserve $RESERVE
MODES=${MODES:-fifo fair reserve} # fifo: no queue; fair: max_concurrency $MAX_CONC; reserve: and queue_reserve
SIM=127.0.0.1:${SIM_PORT:-18931}
GW=127.0.0.1:${GW_PORT:-18932}
MASTER=sk-lg-flood-bench-master-key-0123456789
dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

go build -o "$dir/llmgate" ./cmd/llmgate
go build -o "$dir/flood" ./bench/flood

"$dir/llmgate" sim --model m --listen "$SIM" --max-num-seqs 4 >"$dir/sim.log" 2>&1 &
pids+=($!)

wait_up() { for _ in $(seq 100); do curl -sf -o /dev/null "$@" && return 0; sleep 0.1; done; echo "not up: $*" >&2; return 1; }
wait_up "http://$SIM/v1/models"

# start MODE: start a gateway (fifo: no queue; fair: max_concurrency $MAX_CONC)
# and make keys A and B; f is then the driver's command line for it.
start() {
  local mode=$1 queue=""
  [ "$mode" = fair ] && queue=", max_concurrency: $MAX_CONC"
  [ "$mode" = reserve ] && queue=", max_concurrency: $MAX_CONC, queue_reserve: $RESERVE"
  rm -rf "$dir/gw" && mkdir -p "$dir/gw"
  cat >"$dir/gw/llmgate.yaml" <<YAML
listen: $GW
database: $dir/gw/llmgate.db
spool_dir: $dir/gw/spool
backends:
  sim: {url: http://$SIM/v1}
models:
  m:
    deployments:
      - {backend: sim, upstream_model: m$queue}
YAML
  LLMGATE_MASTER_KEY=$MASTER "$dir/llmgate" serve -c "$dir/gw/llmgate.yaml" >"$dir/gw/serve.log" 2>&1 &
  gw=$!
  wait_up -H "Authorization: Bearer $MASTER" "http://$GW/v1/models"
  local a b
  a=$(curl -sf -H "Authorization: Bearer $MASTER" -d '{"name":"flood-a"}' "http://$GW/admin/keys" | grep -o "sk-lg-[A-Za-z0-9_-]*" | tail -1)
  b=$(curl -sf -H "Authorization: Bearer $MASTER" -d '{"name":"quiet-b"}' "http://$GW/admin/keys" | grep -o "sk-lg-[A-Za-z0-9_-]*" | tail -1)
  f=("$dir/flood" -url "http://$GW/v1" -model m -key-a "$a" -key-b "$b" -flood-tokens "$FLOOD_TOKENS")
}
stop() { kill "$gw"; wait "$gw" 2>/dev/null || true; }

echo "# $(date -u +%FT%TZ) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); flood $FLOOD x $FLOOD_TOKENS tokens, B $QUIET x 8 tokens, fair max_concurrency $MAX_CONC"
if [ "${A_ROUNDS:-0}" = 0 ]; then
  for mode in $MODES; do
    start "$mode"
    echo "$mode B alone:          $("${f[@]}" -flood 0 -quiet "$QUIET")"
    echo "$mode B under flood:    $("${f[@]}" -flood "$FLOOD" -quiet "$QUIET")"
    sleep 6 # B has left: past the reserve's 5 s activity window
    echo "$mode A alone:          $("${f[@]}" -flood "$FLOOD" -quiet 0 -window "$WINDOW")"
    stop
  done
else
  # A alone only, without and with the queue in turns (A_ROUNDS times),
  # so that the machine's other load falls on both alike.
  for i in $(seq "$A_ROUNDS"); do
    for mode in $MODES; do
      start "$mode"
      echo "$mode A alone (round $i): $("${f[@]}" -flood "$FLOOD" -quiet 0 -window "$WINDOW")"
      stop
    done
  done
fi
