#!/usr/bin/env bash
# Compares llmgate with a direct call, a plain TCP forwarder, a minimal
# HTTP/1.1 forwarder and a bare httputil.ReverseProxy on loopback and prints
# the ratios.
# Usage: bench/gateway.sh [-duration 10s] [-c 16] [-rate 1000] [-skip-throughput] [-gw-env GOMAXPROCS=1] [-b other-llmgate-binary] [-a llmgate-binary] [-a-yaml "key: value"] [-b-yaml "key: value"] [-gw-only]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v wrk >/dev/null 2>&1; then
  echo "wrk not found: using the Go load generator (install wrk for a lighter client: apt-get install wrk)" >&2
fi
go build -o /tmp/proxycmp ./bench/proxycmp
exec /tmp/proxycmp "$@"
