#!/usr/bin/env bash
# Release check: the binary the Dockerfile builds works alone, as a
# non-root user, in an empty root with nothing but CA certificates; the
# image builds where a Docker engine is available; scripts/release.sh
# cross-builds; and `llmgate version` names the commit it was built from.
#
# Run from anywhere: .ci/release-check.sh. Output goes to .ci/out/release/.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
OUT=.ci/out/release
rm -rf "$OUT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

log() { printf '\n=== release check: %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }
fail() { echo "release check FAILED: $*" >&2; exit 1; }

head_rev=$(git rev-parse HEAD)

log "static build, as the Dockerfile builds (scripts/build.sh)"
scripts/build.sh "$OUT/llmgate" 2>&1 | tee "$OUT/build.log"
# It says what it builds and when it is done (it was silent for minutes).
grep -q "^build.sh: building $OUT/llmgate: llmgate .* static" "$OUT/build.log" || fail "build.sh did not say what it builds"
grep -q "^build.sh: wrote $OUT/llmgate" "$OUT/build.log" || fail "build.sh did not say it wrote the binary"
file "$OUT/llmgate" | tee "$OUT/file.txt"
grep -q "statically linked" "$OUT/file.txt" || fail "the binary is not statically linked"
ldd "$OUT/llmgate" >"$OUT/ldd.txt" 2>&1 || true
cat "$OUT/ldd.txt"
if grep -q "=>" "$OUT/ldd.txt"; then fail "ldd lists shared libraries"; fi
if command -v readelf >/dev/null 2>&1 && readelf -l "$OUT/llmgate" | grep -q "Requesting program interpreter"; then
  fail "the binary asks for a dynamic loader (PT_INTERP)"
fi

log "llmgate version names the commit"
"$OUT/llmgate" version | tee "$OUT/version.txt"
grep -q "revision  $head_rev" "$OUT/version.txt" || fail "llmgate version does not print git rev-parse HEAD ($head_rev)"

log "alone in an empty root, as a non-root user"
root=$(mktemp -d)
chmod 0755 "$root" # mktemp makes it 0700: user 65534 must enter it
demo=
cleanup() {
  if [ -n "$demo" ]; then kill "$demo" 2>/dev/null || true; wait "$demo" 2>/dev/null || true; fi
  rm -rf "$root"
}
trap cleanup EXIT
install -m 0755 "$OUT/llmgate" "$root/llmgate"
mkdir -p "$root/etc/ssl/certs" "$root/tmp"
chmod 1777 "$root/tmp" # the demo keeps its database in a temporary directory
ca=
for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do
  if [ -f "$f" ]; then ca=$f; break; fi
done
[ -n "$ca" ] || fail "no CA certificate bundle found on this machine"
cp "$ca" "$root/etc/ssl/certs/ca-certificates.crt"
echo "root: $(cd "$root" && find . -mindepth 1 | sort | tr '\n' ' ')"
# As root, chroot changes to user 65534 (nobody) itself; without root, a
# user namespace maps the caller to 65534 and chroots inside it.
if [ "$(id -u)" = 0 ]; then
  runner=(chroot --userspec=65534:65534 "$root")
else
  runner=(unshare --user --map-user=65534 --map-group=65534 --root="$root")
fi
echo "running with: ${runner[*]}"
"${runner[@]}" /llmgate version | tee "$OUT/version-in-root.txt"
grep -q "revision  $head_rev" "$OUT/version-in-root.txt" || fail "version in the empty root lacks the revision"

# The demo on a free port; its banner gives the port and the API key. exec
# keeps one process from the subshell to llmgate, so $demo is llmgate.
(unset LLMGATE_MASTER_KEY LLMGATE_CONFIG LLMGATE_URL; exec "${runner[@]}" /llmgate serve --demo --listen 127.0.0.1:0) >"$OUT/demo.log" 2>&1 &
demo=$!
port=
for _ in $(seq 1 150); do
  port=$(sed -n 's|^ *Base URL *http://127\.0\.0\.1:\([0-9]*\)/v1.*|\1|p' "$OUT/demo.log" | head -n1)
  [ -n "$port" ] && grep -q "^ *API key" "$OUT/demo.log" && break
  kill -0 "$demo" 2>/dev/null || break
  sleep 0.2
done
[ -n "$port" ] || { cat "$OUT/demo.log"; fail "the demo did not start in the empty root"; }
key=$(awk '$1 == "API" && $2 == "key" {print $3; exit}' "$OUT/demo.log")
uid=$(awk '/^Uid:/ {print $2}' "/proc/$demo/status")
echo "demo: pid $demo ($(tr '\0' ' ' <"/proc/$demo/cmdline")), uid $uid, port $port"
[ "$uid" != 0 ] || fail "the demo runs as root"
curl -fsS "http://127.0.0.1:$port/v1/chat/completions" \
  -H "Authorization: Bearer $key" -H "Content-Type: application/json" \
  -d '{"model": "qwen2.5-7b-instruct", "max_tokens": 8, "messages": [{"role": "user", "content": "Hello!"}]}' | tee "$OUT/demo-answer.json"
echo
grep -q '"choices"' "$OUT/demo-answer.json" || fail "the demo's answer has no choices"
kill "$demo"; wait "$demo" 2>/dev/null || true; demo=

log "Docker image"
if ! command -v docker >/dev/null 2>&1; then
  echo "docker: skipped: no docker command on this machine"
elif ! docker info >"$OUT/docker-info.txt" 2>&1; then
  echo "docker: skipped: no Docker engine answers: $(grep -m1 -iE 'error|cannot|permission' "$OUT/docker-info.txt" || head -n1 "$OUT/docker-info.txt")"
else
  docker build -t llmgate:release-check \
    --build-arg VERSION="$(git describe --tags --always --dirty)" \
    --build-arg REVISION="$head_rev" \
    --build-arg REVISION_TIME="$(TZ=UTC git show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD)" .
  docker run --rm --entrypoint /usr/local/bin/llmgate llmgate:release-check version | tee "$OUT/version-docker.txt"
  grep -q "revision  $head_rev" "$OUT/version-docker.txt" || fail "the image's llmgate version lacks the revision"
  [ "$(docker image inspect -f '{{.Config.User}}' llmgate:release-check)" != "" ] || fail "the image runs as root"
fi

log "scripts/release.sh for two targets"
host_target="$(go env GOOS)/$(go env GOARCH)"
other_target=linux/arm64
[ "$host_target" = linux/arm64 ] && other_target=linux/amd64
DIST="$OUT/dist" VERSION=release-check scripts/release.sh "$host_target" "$other_target"
(cd "$OUT/dist" && sha256sum -c SHA256SUMS)
[ "$(wc -l <"$OUT/dist/SHA256SUMS")" -eq 2 ] || fail "SHA256SUMS should list two binaries"
"$OUT/dist/llmgate-release-check-${host_target%/*}-${host_target#*/}" version | tee "$OUT/version-release.txt"
grep -q "^llmgate release-check$" "$OUT/version-release.txt" || fail "the release binary does not carry the stamped version"
grep -q "revision  $head_rev" "$OUT/version-release.txt" || fail "the release binary lacks the revision"
file "$OUT/dist/llmgate-release-check-${other_target%/*}-${other_target#*/}"

echo
echo "release check passed"
