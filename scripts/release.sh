#!/usr/bin/env bash
# Cross-builds release binaries with scripts/build.sh (static, -trimpath,
# version stamped) and writes their SHA-256 checksums.
#
#   scripts/release.sh                        # every target below
#   scripts/release.sh linux/amd64 darwin/arm64
#   VERSION=v1.2.0 DIST=out scripts/release.sh
#
# Output in $DIST (default dist/): llmgate-VERSION-OS-ARCH[.exe] and
# SHA256SUMS, checked with `sha256sum -c SHA256SUMS` (or shasum -a 256 -c).
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64"
if [ $# -gt 0 ]; then targets="$*"; else targets=$all_targets; fi
for t in $targets; do
  case " $all_targets " in
    *" $t "*) ;;
    *) echo "release.sh: unknown target '$t'; choose from: $all_targets" >&2; exit 2 ;;
  esac
done

if [ -z "${VERSION:-}" ]; then
  if git rev-parse --git-dir >/dev/null 2>&1; then VERSION=$(git describe --tags --always --dirty); else VERSION=dev; fi
fi
export VERSION
case $VERSION in *[!A-Za-z0-9._+-]*) echo "release.sh: VERSION '$VERSION' may hold letters, digits and . _ + - only" >&2; exit 2 ;; esac
dist=${DIST:-dist}
mkdir -p "$dist"

built=()
for t in $targets; do
  os=${t%/*} arch=${t#*/}
  name="llmgate-$VERSION-$os-$arch"
  [ "$os" = windows ] && name="$name.exe"
  echo "building $name"
  GOOS=$os GOARCH=$arch scripts/build.sh "$dist/$name"
  built+=("$name")
done

if command -v sha256sum >/dev/null 2>&1; then sum="sha256sum"; else sum="shasum -a 256"; fi
(cd "$dist" && $sum "${built[@]}" > SHA256SUMS)
echo "wrote $dist/SHA256SUMS:"
cat "$dist/SHA256SUMS"
