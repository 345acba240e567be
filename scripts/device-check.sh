#!/usr/bin/env bash
# device-check.sh: the CUDA backend's check on a machine with an NVIDIA GPU.
#
# Run it from anywhere: it works in the repository root. It needs two
# binaries, built on the development machine (the GPU machine may have no Go
# and no network) and carried along with the working tree (bin/ is ignored
# by git, so name it in the run's carry list):
#
#   CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/reprise ./cmd/reprise
#   CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o bin/cuda.test ./accel/cuda
#
# Where a binary is missing and Go is installed here, it is built as above.
# (The conformance suite's model test finds model/stories260k/testdata
# through its source file's path as compiled in: with -trimpath that path is
# module-relative, and the test binary runs from a directory that maps it
# onto this tree; an absolute build path that does not exist here is linked
# to this tree.)
#
# Stages, in order, each under a timeout and all within a total budget
# (DEVICE_CHECK_BUDGET seconds, default 460): the machine and its CUDA
# libraries; `reprise devices`; the accel conformance suite on "cuda" (its
# kernels, capture and replay, failed captures, events, update, out of
# memory, staging, and stories260K's greedy reference through the engine,
# eager and replayed); the backend's own device tests; `reprise generate`
# against the reference texts (the embedded stories260K, stories260K.gguf,
# and llama-quantize's r256-Q4_K_M.gguf against what llama.cpp printed);
# `reprise bench` (decode only) on synthetic 25M and 110M (the GPT-2-class
# shape) models with float32, q8_0 and q4_k weights, then 300M and 1B with
# float32 and 1B with bf16 (the last to go when the budget runs short). A
# failing stage is recorded and the next one runs; the exit status is
# non-zero if any stage failed or was skipped. Where `reprise devices` finds
# no usable cuda device (no GPU, no driver: a fake nvidia-smi), the test
# binary still runs (its device tests skip, a failure here) and every later
# stage is recorded as skipped with the reason; the script exits 1. On a
# timeout the stage gets SIGQUIT first, so a Go program prints every
# goroutine's stack (where it hung), then SIGKILL. The last thing printed is the table of bench results.
#
# With OUT set, the combined log, the bench JSON and the summary are copied
# to $OUT/device-check/ (three files: the device tool brings back at most
# eight).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
START=$(date +%s)
BUDGET=${DEVICE_CHECK_BUDGET:-460}
WORK=$(mktemp -d /tmp/device-check.XXXXXX)
LOG=$WORK/device-check.log
SUMMARY=$WORK/summary.txt
BENCHJSON=$WORK/bench-results.json
: >"$LOG"
: >"$BENCHJSON"
FAILED=0
RESULTS=()
CUDAWHY= # why there is no usable cuda device, where devices finds none
NOCUDA=  # set to CUDAWHY from the first stage that needs a device on

say() { echo "$*" | tee -a "$LOG"; }
elapsed() { echo $(($(date +%s) - START)); }
remaining() { echo $((BUDGET - $(elapsed))); }

record() { # record NAME STATUS SECONDS NOTE
	RESULTS+=("$(printf '%-16s %-5s %5ss  %s' "$1" "$2" "$3" "$4")")
	if [ "$2" != PASS ]; then FAILED=1; fi
}

# stage NAME MAXSECONDS COMMAND...: runs COMMAND under a timeout of at most
# MAXSECONDS, less where the budget runs short; under 20 seconds left, the
# stage is skipped. @GOTIMEOUT@ in the command becomes a Go test timeout 10
# seconds short of the stage's, so a test binary panics with its stacks
# before the hard timeout.
stage() {
	local name=$1 max=$2
	shift 2
	if [ -n "$NOCUDA" ]; then
		say "=== $name: SKIPPED, no usable cuda device"
		record "$name" SKIP 0 "$NOCUDA"
		return 0
	fi
	local left=$(($(remaining) - 15))
	local t=$max
	if ((left < t)); then t=$left; fi
	if ((t < 20)); then
		say "=== $name: SKIPPED, ${left}s left of the ${BUDGET}s budget"
		record "$name" SKIP 0 "out of time (budget ${BUDGET}s)"
		return 0
	fi
	local args=() a
	for a in "$@"; do
		args+=("${a//@GOTIMEOUT@/$((t > 30 ? t - 10 : t))s}")
	done
	say ""
	say "=== $name (timeout ${t}s, at $(elapsed)s of ${BUDGET}s): ${args[*]}"
	local t0 rc=0
	t0=$(date +%s)
	timeout --signal=QUIT --kill-after=10 "$t" "${args[@]}" >"$WORK/$name.out" 2>&1 || rc=$?
	local dt=$(($(date +%s) - t0))
	cat "$WORK/$name.out" >>"$LOG"
	tail -n 40 "$WORK/$name.out"
	if ((rc == 0)); then
		say "=== $name: PASS (${dt}s)"
		record "$name" PASS "$dt" ""
	elif ((rc == 124 || rc == 137)); then
		say "=== $name: TIMEOUT after ${dt}s (a Go program printed its goroutines' stacks above)"
		record "$name" FAIL "$dt" "timed out after ${t}s"
	else
		say "=== $name: FAIL (exit $rc, ${dt}s)"
		local why
		why=$(grep -m1 -E -- '--- FAIL|^panic:' "$WORK/$name.out" || true)
		if [ -z "$why" ]; then why=$(grep -v '^[[:space:]]*$' "$WORK/$name.out" | tail -n 1 || true); fi
		record "$name" FAIL "$dt" "exit $rc: $(echo "$why" | cut -c1-160)"
	fi
	return 0
}

# bench_table prints one line per (model, weights, batch size) from the bench
# JSON documents: with python3, else jq, else awk over the indented JSON.
bench_table() {
	echo "=== bench on cuda: decode step, eager against replayed (medians)"
	if [ ! -s "$BENCHJSON" ]; then
		echo "(no bench results)"
		return 0
	fi
	if command -v python3 >/dev/null 2>&1; then
		if python3 - "$BENCHJSON" <<'PY'; then
import json, sys
text = open(sys.argv[1]).read()
dec = json.JSONDecoder()
docs, i = [], 0
while i < len(text):
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    d, i = dec.raw_decode(text, i)
    docs.append(d)
def dur(ns):
    if not ns:
        return "-"
    if ns < 1e6:
        return "%.1f us" % (ns / 1e3)
    return "%.2f ms" % (ns / 1e6)
for d in docs:
    c = d.get("capture", {})
    print("%s (%s weights, %.1f MiB): %d graph buckets captured in %.2f s" % (d.get("model", "?"), d.get("weights", "?"),
          d.get("weight_bytes", 0) / 2**20, c.get("buckets", 0), c.get("seconds", 0)))
print()
print("%-20s %-7s %5s %12s %12s %7s %14s" % ("model", "weights", "batch", "eager step", "replay step", "ratio", "replay tok/s"))
for d in docs:
    for r in d.get("rows", []):
        replayed = bool(r.get("replay_step_ns"))
        print("%-20s %-7s %5d %12s %12s %7s %14s" % (d.get("model", "?"), d.get("weights", "?"), r["batch_size"],
              dur(r.get("eager_step_ns")), dur(r.get("replay_step_ns")),
              ("%.2fx" % r["eager_over_replay"]) if replayed else "-",
              ("%.1f" % r["replay_tokens_per_s"]) if replayed else "-"))
PY
			return 0
		fi
	fi
	if command -v jq >/dev/null 2>&1; then
		printf '%-20s %-7s %5s %15s %15s %7s %14s\n' model weights batch eager_step_ns replay_step_ns ratio replay_tok/s
		if jq -r '. as $r | .rows[] | [$r.model, $r.weights, .batch_size, .eager_step_ns, .replay_step_ns, .eager_over_replay, .replay_tokens_per_s] | @tsv' "$BENCHJSON" |
			awk -F'\t' '{printf "%-20s %-7s %5s %15s %15s %6.2fx %14.1f\n", $1, $2, $3, $4, $5, $6, $7}'; then
			return 0
		fi
	fi
	awk '
		BEGIN { printf "%-20s %-7s %5s %15s %15s %7s %14s\n", "model", "weights", "batch", "eager step", "replay step", "ratio", "replay tok/s" }
		/"model":/ { v = $2; gsub(/[",]/, "", v); model = v }
		/"weights":/ { v = $2; gsub(/[",]/, "", v); weights = v }
		/"batch_size":/ { v = $2; gsub(/,/, "", v); bs = v }
		/"eager_step_ns":/ { v = $2; gsub(/,/, "", v); eager = v }
		/"replay_step_ns":/ { v = $2; gsub(/,/, "", v); replay = v }
		/"eager_over_replay":/ { v = $2; gsub(/,/, "", v); ratio = v }
		/"replay_tokens_per_s":/ { v = $2; gsub(/,/, "", v);
			printf "%-20s %-7s %5s %12.3f ms %12.3f ms %6.2fx %14.1f\n", model, weights, bs, eager / 1e6, replay / 1e6, ratio, v }
	' "$BENCHJSON"
}

finish() {
	local verdict="device check: all stages passed"
	if ((FAILED)); then
		verdict="device check: FAILED (see the stages above; the full log is device-check.log, here $LOG)"
	fi
	{
		echo
		echo "=== stages (budget ${BUDGET}s, used $(elapsed)s)"
		for r in "${RESULTS[@]}"; do echo "$r"; done
		echo
		echo "$verdict"
		echo
		bench_table
	} >"$SUMMARY" 2>&1
	cat "$SUMMARY" >>"$LOG"
	if [ -n "${OUT:-}" ]; then
		mkdir -p "$OUT/device-check"
		cp "$LOG" "$SUMMARY" "$OUT/device-check/" || true
		if [ -s "$BENCHJSON" ]; then cp "$BENCHJSON" "$OUT/device-check/" || true; fi
		echo "(log, summary and bench JSON copied to $OUT/device-check/)"
	fi
	echo
	cat "$SUMMARY"
	if ((FAILED)); then exit 1; fi
	exit 0
}

trap 'say "device-check: interrupted"; finish' INT TERM

# ---------------------------------------------------------------------------
say "=== device check of the CUDA backend, $(date -u +%Y-%m-%dT%H:%M:%SZ), in $ROOT (work dir $WORK)"
say "--- machine"
if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi -L 2>&1 | tee -a "$LOG" || true
	nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,compute_cap --format=csv 2>&1 | tee -a "$LOG" || true
else
	say "nvidia-smi not found (is this the GPU machine?)"
fi
{
	echo "kernel: $(uname -srm)"
	echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
	echo "REPRISE_CUDA_LIBRARY_PATH=${REPRISE_CUDA_LIBRARY_PATH:-}"
	echo "--- CUDA libraries the loader knows (ldconfig -p):"
	ldconfig -p 2>/dev/null | grep -E 'libcuda\.so|libnvrtc|libcublas' | head -20 || echo "(none)"
	echo "--- CUDA libraries on disk:"
	for d in /usr/local/nvidia/lib64 /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/lib/x86_64-linux-gnu \
		/opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib; do
		[ -d "$d" ] || continue
		ls "$d" 2>/dev/null | grep -E '^(libcuda\.so|libnvrtc|libcublas)' | sed "s|^|$d/|" | head -12 || true
	done
} 2>&1 | tee -a "$LOG"

# Loading a kernel while a stream captures needs a driver for CUDA 12.3 or
# later; lazy loading (the default since 12.2) would load a cuBLAS kernel
# the first time a shape runs, which may be inside a capture. Older drivers
# load every module at start instead.
CUDAVER=$(nvidia-smi 2>/dev/null | grep -o -m1 'CUDA Version: [0-9.]*' | awk '{print $3}' || true)
if [ -n "$CUDAVER" ]; then
	cmaj=${CUDAVER%%.*}
	cmin=${CUDAVER#*.}
	cmin=${cmin%%.*}
	if ((cmaj < 12 || (cmaj == 12 && cmin < 3))); then
		export CUDA_MODULE_LOADING=EAGER
		say "driver for CUDA $CUDAVER (before 12.3): CUDA_MODULE_LOADING=EAGER, since a kernel cannot load during a capture"
	else
		say "driver for CUDA $CUDAVER"
	fi
fi

# ---------------------------------------------------------------------------
say "--- binaries"
GO=
if command -v go >/dev/null 2>&1; then
	GO=$(command -v go)
elif [ -x /usr/local/go/bin/go ]; then
	GO=/usr/local/go/bin/go
fi
build_missing() {
	if [ -x bin/reprise ] && [ -x bin/cuda.test ]; then
		echo "using the prebuilt bin/reprise and bin/cuda.test"
		ls -la bin/
		return 0
	fi
	if [ -z "$GO" ]; then
		echo "bin/reprise or bin/cuda.test is missing and Go is not installed here (no go on PATH, no /usr/local/go/bin/go)."
		echo "Build them on the development machine and carry bin/ along:"
		echo "  CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o bin/reprise ./cmd/reprise"
		echo "  CGO_ENABLED=0 go test -c -trimpath -ldflags='-s -w' -o bin/cuda.test ./accel/cuda"
		return 1
	fi
	echo "building with $GO ($($GO version))"
	mkdir -p bin
	[ -x bin/reprise ] || CGO_ENABLED=0 "$GO" build -trimpath -o bin/reprise ./cmd/reprise
	[ -x bin/cuda.test ] || CGO_ENABLED=0 "$GO" test -c -trimpath -o bin/cuda.test ./accel/cuda
}
t0=$(date +%s)
brc=0
build_missing >"$WORK/build.out" 2>&1 || brc=$?
tee -a "$LOG" <"$WORK/build.out"
if ((brc != 0)); then
	record binaries FAIL $(($(date +%s) - t0)) "missing binaries: build them on the dev machine and carry bin/ (see the log)"
	finish
fi
record binaries PASS $(($(date +%s) - t0)) ""

# Where the test binary's compiled-in source paths lead (see the top).
TESTDIR=$ROOT
if grep -a -q 'github.com/reprise-ml/reprise/accel/acceltest/modeltest/model\.go' bin/cuda.test; then
	src=github.com/reprise-ml/reprise/accel/acceltest/modeltest/model.go
else
	src=$(grep -a -o -E -m1 '(/[[:alnum:]._+-]+)+/accel/acceltest/modeltest/model\.go' bin/cuda.test | head -1 || true)
fi
prefix=${src%/accel/acceltest/modeltest/model.go}
if [ -z "$src" ]; then
	say "note: no acceltest source path found in bin/cuda.test; running it from $ROOT"
elif [ "${prefix#/}" = "$prefix" ]; then
	TESTDIR=$WORK/run
	mkdir -p "$TESTDIR/$(dirname "$prefix")"
	ln -sfn "$ROOT" "$TESTDIR/$prefix"
	say "bin/cuda.test was built with -trimpath ($prefix/...): it runs from $TESTDIR, where $prefix is this tree"
elif [ "$prefix" != "$ROOT" ] && [ ! -e "$prefix/model/stories260k/testdata/Once_upon_a_time.txt" ]; then
	if mkdir -p "$(dirname "$prefix")" 2>/dev/null && ln -sfn "$ROOT" "$prefix" 2>/dev/null; then
		say "bin/cuda.test was built in $prefix: linked $prefix to $ROOT"
	else
		say "!!! bin/cuda.test was built in $prefix, which is not here and cannot be made: the model test will not find its reference (rebuild with -trimpath)"
	fi
fi

# ---------------------------------------------------------------------------
# The device as reprise sees it. A binary built without the cuda blank import
# (in cmd/reprise/devices.go) does not list the backend at all.
stage devices 30 bin/reprise devices
if ! grep -q '^cuda' "$WORK/devices.out" 2>/dev/null; then
	say "!!! bin/reprise does not know the cuda backend: add _ \"github.com/reprise-ml/reprise/accel/cuda\" to cmd/reprise/devices.go and rebuild"
	record devices-cuda FAIL 0 "cuda backend not registered in bin/reprise"
	CUDAWHY="no cuda backend in bin/reprise (see devices-cuda)"
elif grep -q '^cuda: unavailable' "$WORK/devices.out"; then
	record devices-cuda FAIL 0 "$(grep -m1 '^cuda: unavailable' "$WORK/devices.out" | cut -c1-200)"
	CUDAWHY="no usable cuda device (see devices-cuda)"
fi
if [ -n "$CUDAWHY" ]; then
	say "!!! $CUDAWHY: the test binary still runs (its host checks: NVRTC, cuBLAS symbols, kernel layouts), every later stage is skipped"
fi

# The accel conformance suite on "cuda": kernels, graphs, update, nesting,
# captured uploads, BF16, refused operands, the decoder step against the CPU
# device, and the model's greedy reference. It skips where the backend is not
# usable: here that is a failure.
stage conformance 150 bash -c 'cd "$1" && exec "$2" -test.v -test.count=1 -test.run "^TestConformance$" -test.timeout "$3"' _ "$TESTDIR" "$ROOT/bin/cuda.test" @GOTIMEOUT@
if grep -q -- '--- SKIP: TestConformance' "$WORK/conformance.out" 2>/dev/null; then
	say "!!! the conformance suite skipped: the backend is not usable here (see above)"
	record conformance-ran FAIL 0 "conformance skipped: $(grep -m1 -B1 -- '--- SKIP: TestConformance' "$WORK/conformance.out" | head -1 | sed 's/^[[:space:]]*//' | cut -c1-200)"
fi

# The backend's own device tests (large products and sampling against the CPU
# device, the sampler's generator, threading, capture beside eager work, out
# of memory in a capture) and the NVRTC compile check.
stage cuda-tests 100 bash -c 'cd "$1" && exec "$2" -test.v -test.count=1 -test.skip "^TestConformance$" -test.timeout "$3"' _ "$TESTDIR" "$ROOT/bin/cuda.test" @GOTIMEOUT@

if grep -q -- '--- SKIP: TestLargeMatMulMatchesCPU' "$WORK/cuda-tests.out" 2>/dev/null; then
	record cuda-tests-ran FAIL 0 "the device tests skipped: $(grep -m1 -B1 -- '--- SKIP: TestLargeMatMulMatchesCPU' "$WORK/cuda-tests.out" | head -1 | sed 's/^[[:space:]]*//' | cut -c1-200)"
fi

# From here on every stage needs the device.
NOCUDA=$CUDAWHY

# reprise generate, greedy, with graphs, against the reference text.
stage generate 60 bash -c 'bin/reprise generate --device cuda --prompt "Once upon a time" >"$1" && diff -u model/stories260k/testdata/Once_upon_a_time.txt "$1" && echo "generate: the output equals the reference"' _ "$WORK/generate.txt"

# The same reference through the GGUF loader (llama.cpp's conversion of
# stories260K; its file declares 128 positions, the reference needs 256).
stage generate-gguf 60 bash -c 'bin/reprise generate --device cuda --model model/gguf/testdata/stories260K.gguf --max-model-len 512 --prompt "Once upon a time" >"$1" && diff -u model/stories260k/testdata/Once_upon_a_time.txt "$1" && echo "generate-gguf: the output equals the reference"' _ "$WORK/generate-gguf.txt"

# A K-quant file (llama-quantize's Q4_K_M mix) through the dequantising
# matmuls: 68 positions are the prompt and llama.cpp's 64
# tokens, whose text starts with its "<s> " for BOS. llama.cpp quantizes
# activations too, so a difference may be a near-tie (model/llama's
# TestQuantizedFixtures measures it on the CPU, where the texts are equal).
stage generate-q4_k 60 bash -c 'sed "1s/^<s> //" model/gguf/testdata/r256-Q4_K_M.Once_upon_a_time.txt >"$1.want" && bin/reprise generate --device cuda --model quant/testdata/r256-Q4_K_M.gguf --steps 68 --prompt "Once upon a time" >"$1" && diff -u "$1.want" "$1" && echo "generate-q4_k: the output equals llama.cpp'"'"'s"' _ "$WORK/generate-q4_k.txt"

# The bench: decode steps eager and replayed, per batch size.
bench() { # bench LABEL MAXSECONDS MODEL WEIGHTS [BATCHSIZES]
	local label=$1 max=$2 model=$3 weights=$4 sizes=${5:-1,2,4,8,16,32,64}
	stage "$label" "$max" bash -c 'bin/reprise bench -v --device cuda --json --synthetic "$1" --weights "$2" --batch-sizes "$4" --steps 32 --max-time 2s --prefill-lengths 0 >"$3"' _ "$model" "$weights" "$WORK/$label.json" "$sizes"
	if [ -s "$WORK/$label.json" ] && grep -q '"rows"' "$WORK/$label.json"; then
		cat "$WORK/$label.json" >>"$BENCHJSON"
		echo >>"$BENCHJSON"
	fi
	return 0
}
bench bench-25M 60 25M f32
bench bench-110M 70 110M f32
# Quantized weights (quantized at load on the CPU, then the dequantising
# matmul kernels), at fewer batch sizes to keep the run within 8 minutes.
bench bench-25M-q8_0 45 25M q8_0 1,8,64
bench bench-25M-q4_k 45 25M q4_k 1,8,64
bench bench-110M-q8_0 50 110M q8_0 1,8,64
bench bench-110M-q4_k 50 110M q4_k 1,8,64
bench bench-300M 80 300M f32
bench bench-1B 100 1B f32
bench bench-1B-bf16 100 1B bf16

finish
