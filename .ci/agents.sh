#!/usr/bin/env bash
# Real coding agents against llmgate serve --demo (issue 18, "Must show"):
# installs the pinned Claude Code, Codex and opencode from npm into
# test/agents/node_modules (npm ci; nothing global), builds llmgate from this
# tree and runs test/agents (a Go test). Each client is configured only by
# llmgate connect, in a temporary home, and may not reach the internet.
# Logs, each client's output and every request it sent to the gateway are
# kept in .ci/out/agents.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
OUT=.ci/out/agents
rm -rf "$OUT"
mkdir -p "$OUT"
start=$(date +%s)

echo "=== agents: npm ci (pinned versions in test/agents/package-lock.json)"
node --version
npm ci --no-audit --no-fund --prefix test/agents

echo "=== agents: build llmgate"
go build -o "$OUT/llmgate" ./cmd/llmgate

echo "=== agents: run"
set +e
LLMGATE_AGENTS=1 LLMGATE_AGENTS_BIN="$PWD/$OUT/llmgate" LLMGATE_AGENTS_OUT="$PWD/$OUT" \
  go test -count=1 -v -timeout 10m ./test/agents/ 2>&1 | tee "$OUT/test.log"
status=${PIPESTATUS[0]}
set -e
echo "=== agents: $( [ "$status" -eq 0 ] && echo passed || echo FAILED ) in $(( $(date +%s) - start ))s; details in $OUT"
exit "$status"
