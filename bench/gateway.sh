#!/usr/bin/env bash
# Compares llmgate with a direct call, a plain TCP forwarder, a minimal
# HTTP/1.1 forwarder and a tuned bare httputil.ReverseProxy on loopback, the
# targets taking turns (A/B/A/B) in both the throughput and the latency
# test, and prints the ratios with the machine's load.
# Usage: bench/gateway.sh [-duration 10s] [-c 16] [-rate 1000] [-skip-throughput] [-gw-env GOMAXPROCS=1] [-b other-llmgate-binary | -b-rev git-revision] [-a llmgate-binary] [-a-yaml "key: value"] [-b-yaml "key: value"] [-b-env NAME=VALUE] [-gw-only]
# Issue 25's comparison: bench/gateway.sh -duration 24s -b-rev ef4e37c
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v wrk >/dev/null 2>&1; then
  echo "wrk not found: using the Go load generator (install wrk for a lighter client: apt-get install wrk)" >&2
fi
go build -o /tmp/proxycmp ./bench/proxycmp
exec /tmp/proxycmp "$@"
