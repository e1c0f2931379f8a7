#!/usr/bin/env bash
# Runs the Go fuzz targets of the request's first reading: the decoder
# (FuzzDecode_AgreesWithEveryDecoder: what the gateway reads of a body's
# decision fields is what Go and Python backends read) and the JSON scanner
# under it (or, with FUZZ_PACKAGES=all, of the whole repository) for a
# bounded time each, and fails when any of them finds an input that fails
# (the input is then in the package's testdata/fuzz/<Target>/ and printed
# below). The HTTP edge and the backend client are net/http's own.
#
# The differential target gets FUZZTIME_HTTP (default 20s), the others
# FUZZTIME (default 4s), builds besides; FUZZ_PACKAGES=all takes about 3
# minutes on a 2-core machine (the translate targets take 15-20 s each to
# replay their corpora). Every target's seed corpus also runs in plain
# `go test`.
#
# Go 1.26's fuzz coordinator sometimes fails a target with a bare "context
# deadline exceeded" when -fuzztime ends (go.dev/issue/75804, fixed in Go
# 1.27): such a run, with no failing input written, is reported as a flake
# and does not fail the script.
#
# FUZZ_ONLY (an extended regular expression) keeps only the targets whose
# names match it.
#
# Usage: .ci/fuzz.sh     FUZZTIME_HTTP=60s .ci/fuzz.sh     FUZZ_PACKAGES=all .ci/fuzz.sh
#        FUZZ_PACKAGES="./internal/jsonscan ./internal/ledger" .ci/fuzz.sh
#        FUZZ_PACKAGES=./internal/translate FUZZ_ONLY='^FuzzDeltaJSON$' .ci/fuzz.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

FUZZTIME_HTTP="${FUZZTIME_HTTP:-20s}"
FUZZTIME="${FUZZTIME:-4s}"
PARALLEL="${FUZZ_PARALLEL:-2}" # the fuzzing workers; the CI machine has 2 cores

fuzztime() {
  case "$1" in
    FuzzDecode_AgreesWithEveryDecoder) echo "$FUZZTIME_HTTP" ;;
    *) echo "$FUZZTIME" ;;
  esac
}

# flake reports a run that failed only by go.dev/issue/75804: the target's
# one failure line is "context deadline exceeded", no seed failed and no
# failing input was written.
flake() {
  grep -qE '^[[:space:]]+context deadline exceeded$' "$1" &&
    ! grep -q 'Failing input written' "$1" &&
    ! grep -qE -- '--- FAIL: [^ ]+/' "$1"
}

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
failed=()
flakes=()
summary=()
FUZZ_PACKAGES="${FUZZ_PACKAGES:-./internal/codec ./internal/jsonscan}"
if [ "$FUZZ_PACKAGES" = all ]; then
  mapfile -t pkgs < <(grep -rl --include='*_test.go' '^func Fuzz' ./internal ./cmd 2>/dev/null | xargs -n1 dirname | sort -u)
else
  read -r -a pkgs <<<"$FUZZ_PACKAGES"
fi
for pkg in "${pkgs[@]}"; do
  mapfile -t targets < <(grep -hoE '^func Fuzz[A-Za-z0-9_]*\(' "$pkg"/*_test.go | sed -E 's/^func (Fuzz[A-Za-z0-9_]*)\(/\1/' | sort -u | grep -E "${FUZZ_ONLY:-.}")
  for target in "${targets[@]}"; do
    t="$(fuzztime "$target")"
    log="$out/${pkg//\//_}-$target.log"
    printf '=== %s %s (%s)\n' "$pkg" "$target" "$t"
    start=$SECONDS
    # -fuzzminimizetime bounds the minimization of each new input, which
    # otherwise may take a minute per input and stall the run.
    if go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$t" -fuzzminimizetime 5s -parallel "$PARALLEL" >"$log" 2>&1; then
      result=ok
    elif flake "$log"; then
      result=flake
      flakes+=("$pkg $target")
    else
      result=FAILED
      failed+=("$pkg $target")
      cat "$log"
      # The failing input, as go test saved it.
      { grep -oE 'testdata/fuzz/[^ ]+' "$log" || true; } | sort -u | while read -r f; do
        if [ -f "$pkg/$f" ]; then
          echo "--- $pkg/$f"
          cat "$pkg/$f"
        fi
      done
    fi
    execs="$(grep -oE 'execs: [0-9]+' "$log" | tail -n1 | grep -oE '[0-9]+' || echo 0)"
    line="$(printf '%-22s %-32s %-6s %9s execs in %3ds' "$pkg" "$target" "$result" "$execs" $((SECONDS - start)))"
    echo "$line"
    summary+=("$line")
  done
done

echo
echo "=== fuzz summary"
printf '%s\n' "${summary[@]}"
if [ ${#flakes[@]} -gt 0 ]; then
  printf 'fuzz: %d run(s) ended by the fuzz coordinator'"'"'s deadline race (go.dev/issue/75804), not by an input: %s\n' "${#flakes[@]}" "${flakes[*]}"
fi
if [ ${#failed[@]} -gt 0 ]; then
  printf 'fuzz: %d target(s) found a failing input:\n' "${#failed[@]}"
  printf '  %s\n' "${failed[@]}"
  exit 1
fi
echo "fuzz: no finding"
