#!/usr/bin/env bash
# vs-llamacpp.sh: reprise and llama.cpp timed on the same GGUF files, in
# alternating runs, with the same thread count (issue 18).
#
#   LLAMACPP_BIN=/path/to/llama.cpp/build/bin scripts/vs-llamacpp.sh
#   scripts/vs-llamacpp.sh --table   # the table of $WORK/results.tsv so far
#
# LLAMACPP_BIN is a directory holding llama.cpp's llama-bench,
# llama-batched-bench, llama-quantize and llama-convert-llama2c-to-ggml,
# built from llama.cpp's public source (cmake Release, -DGGML_NATIVE=ON,
# CPU only). This script builds nothing of llama.cpp; docs/BENCH.md says
# which source and commit the figures there used.
#
# The files (made once under $WORK, reused by later runs; REMAKE=1 makes
# them again): `reprise synthetic` writes the llama2.c checkpoint of each
# synthetic shape (seed 1, the weights `reprise bench --synthetic NAME`
# runs); llama-convert-llama2c-to-ggml turns it into an f32 GGUF (vocabulary
# from the repository's tok512.bin for vocab 512, from llama.cpp's llama-spm
# vocabulary GGUF in tokenizer/testdata for vocab 32000; the converter
# writes a context length of 128); llama-quantize makes Q8_0, Q4_0 and
# Q4_K_M of it. (The file names start with a letter: llama-quantize takes
# an output name that starts with digits for a numeric type.)
#
# Per file and repetition, in this order (reversed on even repetitions):
#   - llama-bench -t T -p 512 -n 64 -r 2: pp512 and tg64 (batch-1 decode);
#   - reprise bench --batch-sizes 1 --prefill-lengths 512: the replayed
#     batch-1 decode step and the piecewise 512-token prefill (eager where
#     no region shape fits), with --max-model-len 1024 since the file
#     declares 128 positions;
#   - llama-batched-bench -npl 64 -npp 4 -ntg $NTG: 64 sequences of a 4-token
#     prompt each, S_TG (aggregate decode tokens/s), against reprise bench
#     --batch-sizes 64 --warmup 2 --steps $NTG: 64 requests of a 2-token
#     prompt, two decode steps untimed, then $NTG timed, so that both
#     programs' timed steps attend to the same positions (4 to 4+$NTG; the
#     attention of a step grows with them). Before 2026-12-03 reprise's
#     batch 64 ran in the batch-1 run, timed from position 6 to up to 70.
# Both programs keep their default KV cache type: llama.cpp's is f16, and
# reprise's --kv-cache-dtype auto is f16 for the quantized files and f32
# for the f32 ones.
# With REPS > 1 each side's best repetition is reported. Every run's
# 1-minute load average (uptime) when it started and when it ended is
# printed ("start>end"): the figures are only as good as the machine was
# quiet.
#
# Environment (defaults in brackets):
#   LLAMACPP_BIN  llama.cpp's bin directory [required]
#   REPRISE       the reprise binary [built here: GOEXPERIMENT=simd go build]
#   WORK          files and logs [/tmp/vs-llamacpp]
#   SHAPES        synthetic shapes [25M 110M]
#   TYPES         file types [f32 Q8_0 Q4_0 Q4_K_M]
#   THREADS       threads for both programs [2]
#   REPS          repetitions per file [1]
#   BATCHED       1: run the 64-sequence comparison, 0: skip it [1]
#   NTG           tokens each of llama-batched-bench's 64 sequences decodes [32]
#   PREFILL_RUNS  reprise's 512-token prefills timed per mode [2]
#   REMAKE        1: make the files again [0]
# The table goes to stdout (and $WORK/table.md); progress to stderr.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/vs-llamacpp}
res=$WORK/results.tsv

# table: the markdown table of $res, each side's best run per file and metric.
table() {
	python3 - "$res" <<'EOF'
import sys
best, loads, order = {}, {}, []
for line in open(sys.argv[1]):
    name, metric, side, tps, load = line.rstrip("\n").split("\t")
    key = (name, metric)
    if key not in order:
        order.append(key)
    if float(tps) > best.get((key, side), -1):
        best[(key, side)] = float(tps)
    loads.setdefault((key, side), []).append(load)
print("| file | metric | reprise tok/s | llama.cpp tok/s | reprise / llama.cpp | load (reprise; llama.cpp) |")
print("|---|---|---|---|---|---|")
for key in order:
    r, l = best.get((key, "reprise")), best.get((key, "llama.cpp"))
    ratio = f"{r / l:.2f}" if r and l else "-"
    fmt = lambda v: f"{v:,.1f}" if v is not None else "-"
    ld = "; ".join(",".join(loads.get((key, s), ["-"])) for s in ("reprise", "llama.cpp"))
    print(f"| {key[0]}.gguf | {key[1]} | {fmt(r)} | {fmt(l)} | {ratio} | {ld} |")
EOF
}
if [[ ${1:-} = --table ]]; then
	table
	exit
fi
: "${LLAMACPP_BIN:?set LLAMACPP_BIN to the llama.cpp build/bin directory}"
SHAPES=${SHAPES:-25M 110M}
TYPES=${TYPES:-f32 Q8_0 Q4_0 Q4_K_M}
THREADS=${THREADS:-2}
REPS=${REPS:-1}
BATCHED=${BATCHED:-1}
NTG=${NTG:-32}
PREFILL_RUNS=${PREFILL_RUNS:-2}
REMAKE=${REMAKE:-0}
for t in llama-bench llama-batched-bench llama-quantize llama-convert-llama2c-to-ggml; do
	[[ -x $LLAMACPP_BIN/$t ]] || { echo "vs-llamacpp: $LLAMACPP_BIN/$t: not found or not executable" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "vs-llamacpp: needs python3 (to read the programs' JSON)" >&2; exit 2; }
mkdir -p "$WORK"
if [[ -z ${REPRISE:-} ]]; then
	REPRISE=$WORK/reprise
	echo "vs-llamacpp: building $REPRISE (GOEXPERIMENT=simd)" >&2
	(cd "$root" && GOEXPERIMENT=simd nice go build -o "$REPRISE" ./cmd/reprise)
fi
log() { echo "vs-llamacpp: $*" >&2; }
load1() { awk '{print $1}' /proc/loadavg; }

# make_files SHAPE: the f32 GGUF and its quantizations.
make_files() {
	local shape=$1 ck=$WORK/synth-$1.llama2c.bin f32=$WORK/synth-$1-f32.gguf vocab
	if [[ $REMAKE = 1 || ! -s $f32 ]]; then
		"$REPRISE" synthetic --synthetic "$shape" --seed 1 --out "$ck" >&2
		case $(od -An -td4 -j20 -N4 "$ck" | tr -d ' -') in
		512) vocab=$root/model/stories260k/tok512.bin ;;
		32000) vocab=$root/tokenizer/testdata/vocab/ggml-vocab-llama-spm.gguf ;;
		*) log "synthetic $shape: no vocabulary of its size to copy"; exit 1 ;;
		esac
		nice "$LLAMACPP_BIN/llama-convert-llama2c-to-ggml" --copy-vocab-from-model "$vocab" \
			--llama2c-model "$ck" --llama2c-output-model "$f32" >"$WORK/convert-$shape.log" 2>&1 ||
			{ log "converting $shape failed: $WORK/convert-$shape.log"; exit 1; }
		rm -f "$ck"
	fi
	for t in $TYPES; do
		[[ $t = f32 ]] && continue
		local q=$WORK/synth-$shape-$t.gguf
		if [[ $REMAKE = 1 || ! -s $q ]]; then
			nice "$LLAMACPP_BIN/llama-quantize" "$f32" "$q" "$t" "$THREADS" >"$WORK/quantize-$shape-$t.log" 2>&1 ||
				{ log "llama-quantize $shape $t failed: $WORK/quantize-$shape-$t.log"; exit 1; }
		fi
	done
}

# Each run appends "file<TAB>metric<TAB>side<TAB>tok/s<TAB>load" to $res.
: >"$res"

run_llama_bench() {
	local f=$1 name=$2 l out
	l=$(load1)
	out=$WORK/llama-bench-$name.jsonl
	"$LLAMACPP_BIN/llama-bench" -m "$f" -t "$THREADS" -p 512 -n 64 -r 2 -o jsonl >"$out" 2>"$WORK/llama-bench-$name.err" ||
		{ log "llama-bench $name failed: $WORK/llama-bench-$name.err"; return; }
	l="$l>$(load1)"
	python3 - "$out" "$name" "$l" >>"$res" <<'EOF'
import json, sys
path, name, load = sys.argv[1:]
for line in open(path):
    if not line.startswith("{"):
        continue
    d = json.loads(line)
    metric = "pp512" if d["n_prompt"] == 512 else "tg64 (batch 1)"
    print(f"{name}\t{metric}\tllama.cpp\t{d['avg_ts']:.1f}\t{load}")
EOF
}

run_reprise() {
	local f=$1 name=$2 l out
	l=$(load1)
	out=$WORK/reprise-$name.json
	REPRISE_CPU_THREADS=$THREADS "$REPRISE" bench --model "$f" --batch-sizes 1 --prefill-lengths 512 \
		--prefill-runs "$PREFILL_RUNS" --max-model-len 1024 --json >"$out" 2>"$WORK/reprise-$name.err" ||
		{ log "reprise bench $name failed: $WORK/reprise-$name.err"; return; }
	l="$l>$(load1)"
	reprise_rows "$out" "$name" "$l"
	[[ $BATCHED = 1 ]] || return 0
	l=$(load1)
	out=$WORK/reprise-64-$name.json
	REPRISE_CPU_THREADS=$THREADS "$REPRISE" bench --model "$f" --batch-sizes 64 --prefill-lengths 0 \
		--warmup 2 --steps "$NTG" --max-time 60s --max-model-len 1024 --json >"$out" 2>"$WORK/reprise-64-$name.err" ||
		{ log "reprise bench $name at 64 failed: $WORK/reprise-64-$name.err"; return; }
	l="$l>$(load1)"
	reprise_rows "$out" "$name" "$l"
}

# reprise_rows appends the rows of reprise bench's JSON $1 for file $2,
# loads $3, to $res.
reprise_rows() {
	python3 - "$1" "$2" "$3" >>"$res" <<'EOF'
import json, sys
path, name, load = sys.argv[1:]
d = json.load(open(path))
for r in d["rows"]:
    tps = r["replay_tokens_per_s"] or r["eager_tokens_per_s"]
    metric = "tg64 (batch 1)" if r["batch_size"] == 1 else "decode, 64 sequences"
    print(f"{name}\t{metric}\treprise\t{tps:.1f}\t{load}")
for p in d.get("prefill", []):
    ns = p["piecewise_ns"] or p["eager_ns"]
    print(f"{name}\tpp{p['tokens']}\treprise\t{p['tokens'] / ns * 1e9:.1f}\t{load}")
EOF
}

run_llama_batched() {
	local f=$1 name=$2 l out
	l=$(load1)
	out=$WORK/llama-batched-bench-$name.jsonl
	"$LLAMACPP_BIN/llama-batched-bench" -m "$f" -t "$THREADS" -tb "$THREADS" -c $((64 * (4 + NTG))) -npp 4 -ntg "$NTG" -npl 64 \
		--output-format jsonl >"$out" 2>"$WORK/llama-batched-bench-$name.err" ||
		{ log "llama-batched-bench $name failed: $WORK/llama-batched-bench-$name.err"; return; }
	l="$l>$(load1)"
	python3 - "$out" "$name" "$l" >>"$res" <<'EOF'
import json, sys
path, name, load = sys.argv[1:]
for line in open(path):
    if line.startswith("{"):
        d = json.loads(line)
        print(f"{name}\tdecode, 64 sequences\tllama.cpp\t{d['speed_tg']:.1f}\t{load}")
EOF
}

for shape in $SHAPES; do
	make_files "$shape"
done
for shape in $SHAPES; do
	for t in $TYPES; do
		f=$WORK/synth-$shape-$t.gguf name=synth-$shape-$t
		for ((rep = 1; rep <= REPS; rep++)); do
			log "$name, repetition $rep of $REPS (load $(load1))"
			if ((rep % 2)); then
				run_llama_bench "$f" "$name"
				run_reprise "$f" "$name"
				[[ $BATCHED = 1 ]] && run_llama_batched "$f" "$name"
			else
				[[ $BATCHED = 1 ]] && run_llama_batched "$f" "$name"
				run_reprise "$f" "$name"
				run_llama_bench "$f" "$name"
			fi
		done
	done
done

table | tee "$WORK/table.md"
