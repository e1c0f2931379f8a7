#!/usr/bin/env bash
# Measures the inputs of docs/kubernetes.md's capacity plan on loopback:
# gateway CPU per request, ledger records per second written to
# PostgreSQL (and per commit), Redis commands per request, with a virtual
# key that has RPM, TPM and budget limits (so the limiter does its work).
# It starts its own redis-server (so INFO commandstats counts only this
# gateway), a simulator and `llmgate serve` on PostgreSQL, sends a bounded
# closed-loop load with `llmgate bench`, and prints the figures.
# Usage: PG=postgres://postgres@127.0.0.1:5432 bench/capacity.sh [-n 3000] [-c 32] [-o 16 (output tokens per stream)]
# The PostgreSQL server must let it CREATE DATABASE llmgate_capacity (dropped at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
N=3000 C=32 O=16
while [ $# -gt 0 ]; do case "$1" in -n) N=$2; shift 2;; -c) C=$2; shift 2;; -o) O=$2; shift 2;; *) echo "unknown flag $1" >&2; exit 2;; esac; done
PG=${PG:-postgres://postgres@127.0.0.1:5432}
W=$(mktemp -d); BIN=$W/llmgate
go build -o "$BIN" ./cmd/llmgate
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
  psql "$PG/postgres?sslmode=disable" -qc 'DROP DATABASE IF EXISTS llmgate_capacity' >/dev/null 2>&1 || true; rm -rf "$W"; }
trap cleanup EXIT
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
RP=$(port) SP=$(port) GP=$(port)
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$W/redis.log" 2>&1 & pids+=($!)
psql "$PG/postgres?sslmode=disable" -qc 'DROP DATABASE IF EXISTS llmgate_capacity' -c 'CREATE DATABASE llmgate_capacity' >/dev/null
DB="$PG/llmgate_capacity?sslmode=disable"
"$BIN" sim --model cap-m --listen 127.0.0.1:$SP --decode-base 1ms --decode-per-seq 0s --prefill-base 1ms --prefill-per-token 0s \
  --mean-output-tokens 16 --max-num-seqs 1024 >"$W/sim.log" 2>&1 & pids+=($!)
cat >"$W/llmgate.yaml" <<YAML
listen: 127.0.0.1:$GP
database: $DB
redis: redis://127.0.0.1:$RP/0
spool_dir: $W/spool
backends:
  sim: {url: "http://127.0.0.1:$SP/v1"}
models:
  m: {backend: sim, upstream_model: cap-m, input_price: 0.3, output_price: 0.6}
YAML
for i in $(seq 50); do redis-cli -p "$RP" ping >/dev/null 2>&1 && break; sleep 0.1; done
LLMGATE_MASTER_KEY=sk-lg-capacity-master "$BIN" serve -c "$W/llmgate.yaml" >"$W/gw.log" 2>&1 & GW=$!; pids+=($GW)
for i in $(seq 100); do curl -fs "http://127.0.0.1:$GP/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
KEY=$("$BIN" keys create --url "http://127.0.0.1:$GP" --master-key sk-lg-capacity-master --name cap --rpm 10000000 --tpm 1000000000 \
  --budget 1000000 --budget-period monthly 2>&1 | grep -o 'sk-lg-[A-Za-z0-9_-]*' | head -1)
bench() { "$BIN" bench --base-url "http://127.0.0.1:$GP/v1" --api-key "$KEY" --model m --input-len 64 --output-len "$O" --ignore-eos --warmup 0 "$@" --format json >/dev/null; }
bench --concurrency 8 --num-requests 200   # warm-up: connections, caches
sleep 1
rows() { psql "$DB" -tAc 'SELECT count(*) FROM usage'; }
commits() { psql "$DB" -tAc "SELECT xact_commit FROM pg_stat_database WHERE datname = 'llmgate_capacity'"; }
cpu() { awk '{print $14+$15}' "/proc/$GW/stat"; }
redis-cli -p "$RP" CONFIG RESETSTAT >/dev/null
r0=$(rows) x0=$(commits) c0=$(cpu) t0=$(date +%s.%N)
bench --concurrency "$C" --num-requests "$N"
t1=$(date +%s.%N) c1=$(cpu)
for i in $(seq 100); do [ "$(rows)" -ge $((r0 + N)) ] && break; sleep 0.1; done
t2=$(date +%s.%N) r1=$(rows) x1=$(commits)
bpr=$(psql "$DB" -tAc "SELECT pg_total_relation_size('usage') / greatest(count(*), 1) FROM usage")
tick=$(getconf CLK_TCK)
redis_calls=$(redis-cli -p "$RP" INFO commandstats | awk -F'[:=,]' '/^cmdstat_/ && $1 != "cmdstat_config" && $1 != "cmdstat_info" {s+=$3} END {print s}')
python3 - "$N" "$C" "$t0" "$t1" "$t2" "$c0" "$c1" "$tick" "$r0" "$r1" "$x0" "$x1" "$redis_calls" "$O" <<'PY'
import sys
n,c,t0,t1,t2,c0,c1,tick,r0,r1,x0,x1,rc = sys.argv[1:14]
n=int(n); el=float(t1)-float(t0); elw=float(t2)-float(t0)
cpu=(int(c1)-int(c0))/int(tick)
rows=int(r1)-int(r0); xs=int(x1)-int(x0)
print(f"requests            {n} streamed chat completions of ~64 prompt tokens and {sys.argv[14]} output tokens at concurrency {c} in {el:.2f}s = {n/el:.0f} req/s through the gateway")
print(f"gateway CPU         {cpu:.2f} CPU-s = {cpu/n*1e6:.0f} µs of CPU per request")
print(f"ledger rows written {rows} in {elw:.2f}s = {rows/elw:.0f} records/s, {xs} PostgreSQL commits (all sessions of the database) = {rows/max(xs,1):.1f} records per commit")
print(f"redis commands      {rc} = {int(rc)/n:.2f} per request (INFO commandstats, which counts the commands Lua scripts run too)")
PY
echo "usage table         $bpr bytes per record on disk, indexes included"
redis-cli -p "$RP" INFO commandstats | grep '^cmdstat_' | grep -v -e cmdstat_config -e cmdstat_info
