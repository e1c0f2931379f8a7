#!/usr/bin/env bash
# Real coding agents through llmgate (issues 18 and 29): installs the pinned
# Claude Code, Codex and opencode from npm into test/agents/node_modules (npm
# ci; nothing global), builds llmgate from this tree and runs test/agents (Go
# tests): the clients against llmgate serve --demo with a scripted simulator,
# then against llama.cpp's real llama-server, which llmgate serve -c starts
# from its engines: section (test/real-engine/setup.sh prepares it; a context
# of 14,336 tokens, tight for Claude Code's prompt). Each client is configured
# only by llmgate connect, in a temporary home, and may not reach the
# internet. Logs, each client's output and every request it sent to the
# gateway are kept in .ci/out/agents (the real engine's in real-engine/, with
# summary.txt: exit codes, prompt counts, cached shares). About 4 minutes on
# two idle cores with warm caches.
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

echo "=== agents: llama.cpp's llama-server and its test model (test/real-engine/setup.sh)"
if [ -z "${LLMGATE_TEST_LLAMA_SERVER:-}" ] || [ -z "${LLMGATE_TEST_LLAMA_MODEL:-}" ]; then
  eval "$(test/real-engine/setup.sh)"
fi
export LLMGATE_TEST_LLAMA_SERVER LLMGATE_TEST_LLAMA_MODEL

echo "=== agents: build llmgate"
go build -o "$OUT/llmgate" ./cmd/llmgate

echo "=== agents: run"
set +e
LLMGATE_AGENTS=1 LLMGATE_AGENTS_BIN="$PWD/$OUT/llmgate" LLMGATE_AGENTS_OUT="$PWD/$OUT" \
  go test -count=1 -v -timeout 30m ./test/agents/ 2>&1 | tee "$OUT/test.log"
status=${PIPESTATUS[0]}
set -e
if grep -qE -- '--- SKIP: TestAgents_' "$OUT/test.log"; then
  echo "=== agents: a suite skipped (see above why); none may in CI"
  status=1
fi
if [ -f "$OUT/real-engine/summary.txt" ]; then
  echo "=== agents: on llama-server"
  cat "$OUT/real-engine/summary.txt"
fi
echo "=== agents: $( [ "$status" -eq 0 ] && echo passed || echo FAILED ) in $(( $(date +%s) - start ))s; details in $OUT"
exit "$status"
