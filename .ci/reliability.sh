#!/usr/bin/env bash
# The reliability suite of issue 19 (test/reliability): real llmgate serve
# processes on loopback, SIGKILLed under load (SQLite; one of two replicas
# on PostgreSQL), sent 50 bodies that declare 32 MiB and trickle in, robbed
# of their database directory, given keys by another process and duplicate
# X-Request-Ids; and two replicas sharing a Redis that is restarted empty
# and then stopped under load (internal/cluster, with its own redis-server;
# it needs LLMGATE_TEST_REDIS too). Every test prints its figures; this script keeps the log
# in .ci/out/reliability/test.log and ends with a summary. It needs
# PostgreSQL (LLMGATE_TEST_PG; .ci/run starts it and sets it) and takes
# 2-3 minutes on a 2-core machine, the build included.
#
# Usage: .ci/reliability.sh      LLMGATE_TEST_PG=postgres://... .ci/reliability.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
OUT=.ci/out/reliability
rm -rf "$OUT"
mkdir -p "$OUT"
start=$(date +%s)

echo "=== reliability: build llmgate"
go build -o "$OUT/llmgate" ./cmd/llmgate

echo "=== reliability: run"
set +e
{
  LLMGATE_RELIABILITY=1 LLMGATE_RELIABILITY_BIN="$PWD/$OUT/llmgate" \
    go test -v -count=1 -timeout 20m ./test/reliability
  s1=$?
  go test -v -count=1 -timeout 10m -run 'TestReplicas_BudgetAndRPMHoldThroughARedisRestartAndARedisOutage' ./internal/cluster
  s2=$?
  exit $(( s1 | s2 ))
} 2>&1 | tee "$OUT/test.log"
status=${PIPESTATUS[0]}
set -e

echo
echo "=== reliability: summary"
# The figures each test printed under its name, then each test's outcome.
sed -nE -e 's/^=== RUN +(.*)/\1/p' -e 's/^ +[a-z_]+_test\.go:[0-9]+: /    /p' "$OUT/test.log"
echo
grep -E '^\s*--- (PASS|FAIL|SKIP)' "$OUT/test.log" || true
passed=$(grep -cE '^\s*--- PASS' "$OUT/test.log" || true)
failed=$(grep -cE '^\s*--- FAIL' "$OUT/test.log" || true)
skipped=$(grep -cE '^\s*--- SKIP' "$OUT/test.log" || true)
echo "reliability: $passed passed, $failed failed, $skipped skipped (tests and subtests) in $(( $(date +%s) - start ))s; log in $OUT/test.log"
if [ "$skipped" -ne 0 ]; then
  echo "reliability: FAILED: a test of the suite skipped (see above why); none may"
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "reliability: FAILED"
  exit "$status"
fi
echo "reliability: passed"
