#!/usr/bin/env bash
# Builds one llmgate binary the release way: static (CGO_ENABLED=0),
# -trimpath, stripped, with the version, VCS revision, revision time and
# modified flag stamped in with -ldflags -X (see cmd/llmgate/version.go).
# The Dockerfile, scripts/release.sh and .ci/release-check.sh all build
# through this script, so the three build alike.
#
#   scripts/build.sh OUTPUT            # for this machine
#   GOOS=darwin GOARCH=arm64 scripts/build.sh dist/llmgate
#
# VERSION, REVISION, REVISION_TIME and MODIFIED, when set (even empty),
# are used as given; otherwise they come from git: VERSION from
# `git describe --tags --always --dirty`, REVISION from `git rev-parse HEAD`.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 OUTPUT" >&2; exit 2; }
out=$1
cd "$(dirname "$0")/.."

in_git=false
if git rev-parse --git-dir >/dev/null 2>&1; then in_git=true; fi
if [ -z "${VERSION+set}" ]; then
  if $in_git; then VERSION=$(git describe --tags --always --dirty); else VERSION=dev; fi
fi
if [ -z "${REVISION+set}" ]; then
  REVISION=""
  if $in_git; then REVISION=$(git rev-parse HEAD); fi
fi
if [ -z "${REVISION_TIME+set}" ]; then
  REVISION_TIME=""
  if $in_git; then REVISION_TIME=$(TZ=UTC git show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD); fi
fi
if [ -z "${MODIFIED+set}" ]; then
  MODIFIED=false
  if $in_git && [ -n "$(git status --porcelain --untracked-files=no)" ]; then MODIFIED=true; fi
fi
for v in "$VERSION" "$REVISION" "$REVISION_TIME" "$MODIFIED"; do
  case $v in *[[:space:]\'\"]*) echo "build.sh: stamped values must not contain blanks or quotes: '$v'" >&2; exit 2 ;; esac
done

ldflags="-s -w -X main.version=$VERSION -X main.revision=$REVISION -X main.revisionTime=$REVISION_TIME -X main.modified=$MODIFIED"
# It says what it does on stderr, and every 15 s while the compiler works:
# a first build compiles every dependency (pure-Go SQLite, the PostgreSQL and
# Redis clients, OpenTelemetry) and takes minutes, which a silent script
# makes look hung.
target="$(go env GOOS)/$(go env GOARCH)"
echo "build.sh: building $out: llmgate $VERSION for $target, static (CGO_ENABLED=0), trimmed; a first build compiles every dependency and takes minutes" >&2
start=$SECONDS
( while sleep 15; do echo "build.sh: still compiling ($((SECONDS - start)) s)" >&2; done ) &
ticker=$!
trap 'kill "$ticker" 2>/dev/null || true' EXIT
# -buildvcs=false: the values above are the record (Go's own VCS stamping
# needs a .git directory, which a container build and a git worktree lack).
CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$out" ./cmd/llmgate
kill "$ticker" 2>/dev/null || true
echo "build.sh: wrote $out ($(du -h "$out" | cut -f1)) in $((SECONDS - start)) s" >&2
