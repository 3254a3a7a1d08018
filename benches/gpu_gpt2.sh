#!/usr/bin/env bash
# GPT-2 measurements on a CUDA machine: leanburn's example in its modes and settings, and
# the plain PyTorch loop of benches/pytorch_gpt2.py on the same shapes, one after another
# on the same GPU. The figures in docs/benchmarks.md ("GPU") come from this script.
#
# Built elsewhere and staged in .gpu/, each file optionally gzipped (unpacked here first;
# see docs/benchmarks.md for the exact commands):
#   .gpu/gpt2_small_hybrid     the example, `cargo build --release --features cuda`
#   .gpu/corpus.txt            the text both sides train on
#   .gpu/r50k_base.tiktoken    GPT-2's BPE for the PyTorch side (tiktoken cannot download)
#   .gpu/gpt2_parts            for `parts` cases only: `cargo build --release --features cuda
#                              --bench gpt2_parts`, target/release/deps/gpt2_parts-<hash>
#
#   bash benches/gpu_gpt2.sh CASE [CASE ...]     # results under $OUT (default ./gpu-out)
#   bash benches/gpu_gpt2.sh                     # the comparison below, in one device call
#
# A case is NAME:SECONDS:ARGS, ARGS separated by commas, e.g.
#   full:300:--mode,full,--steps,300      leanburn example (gpt2-small on CUDA)
#   torch-f32:120:--steps,100             benches/pytorch_gpt2.py (name starts with torch)
#   parts-f32:240:--torch-precision,tf32  benches/gpt2_parts.rs with PyTorch's column (name
#                                         starts with parts): where a step's time goes
#   full-cubecl:300:LEANBURN_GEMM=cubecl,--mode,full   a NAME=VALUE field sets the case's
#                                         environment (here: CubeCL's matmul, not cuBLASLt)
#   parts-prof:120:PROFILE=basic,--parts,step   PROFILE=LEVEL also turns on CubeCL's per-kernel
#                                         profiling for that case (logs/NAME.profile)
# With no CASE: gpt2-small, batch 8 × 1024, full mode, the same shapes on both sides, in
# about seven minutes once the kernel cache is warm (a cold cache costs minutes per
# precision: restore one, or warm it first with the example's --warm-cache):
#   lean-f32   leanburn f32 (cuBLASLt runs f32 inputs as TF32: compare with torch-tf32)
#   lean-bf16  leanburn bf16 compute, f32 master weights (the example's default on CUDA)
#   torch-f32, torch-tf32, torch-bf16 (autocast)
# Both sides pad the vocabulary to 50,304 (leanburn's GPU default, PyTorch --pad-vocab 64);
# leanburn computes the loss in chunks sized from the device (1,024 tokens at this shape on an
# 80 GB GPU; `--loss-chunk 256` was the fixed default before), PyTorch over the full
# logits. The table at the end gives tokens/s and nvidia-smi's peak for each.
# Each case runs under `timeout SECONDS`, with nvidia-smi sampling the GPU's used memory
# every 200 ms (the driver's view: both programs' CUDA context, pool and cache included).
# Per case: NAME.log (all output) and a line in summary.tsv; the example's metrics and
# validation files are collected into results.tar.gz, saved after every case.
#
# WARM="f32 bf16" first runs the example's --warm-cache once per listed precision, all at
# once (CubeCL's cache files are multi-process safe), each under `timeout WARM_LIMIT`
# (default 330 s), at the default cases' shapes: the cold start (compilation and
# autotuning) then overlaps across precisions, and the cases start warm, so their first
# step is the warm-start figure. Autotuning two processes side by side on one GPU can pick
# other kernels than one process alone would. logs/warm-PRECISION.log has each warm-up.
#
# The kernel cache, NVRTC's library path and the environment record come from
# benches/gpu_setup.sh (restored from .gpu/cubecl-cache.tar.gz.part* when they exist,
# written back to $OUT/cubecl-cache.tar.gz.part*, so a second session starts warm).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
# What comes back from the device call: results.tar.gz (the logs), summary.tsv and the
# kernel cache's parts, written again after every case, so that a call cut short by its
# time limit still returns what ran (the device tool returns at most eight files: the logs
# themselves stay in /tmp).
RESULTS=${OUT:-$PWD/gpu-out}
OUT=/tmp/leanburn-out
rm -rf "$OUT"
mkdir -p "$RESULTS"
. benches/gpu_setup.sh
save_results() {
  tar -C "$OUT" -czf "$RESULTS/results.tar.gz" logs
  cp "$OUT/summary.tsv" "$RESULTS/"
  rm -f "$RESULTS"/cubecl-cache.tar.gz.part*
  (OUT=$RESULTS save_kernel_cache) >/dev/null
}
chmod +x .gpu/gpt2_small_hybrid
[ -e .gpu/gpt2_parts ] && chmod +x .gpu/gpt2_parts

if [ $# -eq 0 ]; then
  lean=--mode,full,--steps,60,--eval-every,1000,--eval-batches,1,--checkpoint-every,1000
  torch=--steps,60,--skip,10,--pad-vocab,64
  set -- "lean-f32:110:$lean,--precision,f32" "lean-bf16:110:$lean,--precision,bf16" \
    "torch-f32:70:$torch" "torch-tf32:60:$torch,--precision,tf32" "torch-bf16:60:$torch,--precision,bf16"
fi

if [ -n "${WARM:-}${COLD:-}" ]; then
  started=$SECONDS
  # COLD=PRECISION (f32, bf16): also a cold start: the example as a user first runs it (its
  # own empty kernel cache, Burn's default autotune level), three full
  # steps in that precision; logs/cold-PRECISION.log has its time to the first step. Beside
  # WARM's warm-ups it is an upper bound (they share the CPU cores that compile and the GPU
  # that autotunes); without WARM it runs alone. Its cubecl.toml sets the caches where
  # `--kernel-cache` would and logs each kernel's name as it compiles
  # (logs/cold-PRECISION.compiled: which kernels the cold start compiles, and how many).
  if [ -n "${COLD:-}" ]; then
    mkdir -p /tmp/leanburn-cold
    printf '[compilation]\ncache = { file = "%s" }\n\n[compilation.logger]\nlevel = "basic"\nfile = "%s"\n\n[autotune]\ncache = { file = "%s" }\n' \
      /tmp/leanburn-cold/cache/cubecl "$OUT/logs/cold-$COLD.compiled" /tmp/leanburn-cold/cache/cubecl \
      >/tmp/leanburn-cold/cubecl.toml
    (cd /tmp/leanburn-cold && timeout "${WARM_LIMIT:-330}" "$ROOT/.gpu/gpt2_small_hybrid" --backend cuda \
      --data "$ROOT/.gpu/corpus.txt" --kernel-cache /tmp/leanburn-cold/cache --out "$RUNS/cold" --overwrite \
      --mode full --steps 3 --eval-every 1000 --eval-batches 1 --checkpoint-every 1000 --precision "$COLD") \
      >"$OUT/logs/cold-$COLD.log" 2>&1 &
  fi
  for precision in ${WARM:-}; do
    (cd "$WORK" && timeout "${WARM_LIMIT:-330}" "$ROOT/.gpu/gpt2_small_hybrid" --backend cuda \
      --data "$ROOT/.gpu/corpus.txt" --warm-cache --precision "$precision") >"$OUT/logs/warm-$precision.log" 2>&1 &
  done
  wait
  for precision in ${WARM:-}; do
    echo "=== warm $precision: $(grep -h 'warmed\|error' "$OUT/logs/warm-$precision.log" | tail -2)"
  done
  if [ -n "${COLD:-}" ]; then
    echo "=== cold $COLD: $(grep -h 'first step of this process\|error' "$OUT/logs/cold-$COLD.log" | tail -2)"
    echo "=== cold $COLD: $(grep -c 'Compiling kernel' "$OUT/logs/cold-$COLD.compiled" 2>/dev/null) kernels compiled, by name:"
    sed 's/.*:://' "$OUT/logs/cold-$COLD.compiled" 2>/dev/null | sort | uniq -c | sort -rn | head -30
  fi
  echo "warm-up of ${WARM:-}${COLD:+ and a cold start} side by side: $((SECONDS - started)) s"
fi

printf 'case\tseconds\texit\tpeak_gpu_used_mib\tidle_gpu_used_mib\n' >>"$OUT/summary.tsv"
used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }

for case in "$@"; do
  name=${case%%:*}
  rest=${case#*:}
  limit=${rest%%:*}
  IFS=',' read -r -a fields <<<"${rest#*:}"
  # NAME=VALUE fields set the case's environment (e.g. LEANBURN_GEMM=cubecl); the rest are arguments.
  envs=() args=()
  for field in "${fields[@]}"; do
    if [[ $field =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$field"); else args+=("$field"); fi
  done
  # PROFILE=LEVEL (a case field): the case runs where its cubecl.toml also turns on CubeCL's
  # per-kernel profiling (minimal | basic | medium | full), logged to logs/NAME.profile.
  dir=$WORK
  for field in "${envs[@]}"; do
    if [[ $field == PROFILE=* ]]; then
      dir=$WORK-$name
      mkdir -p "$dir"
      { cat "$WORK/cubecl.toml"; printf '\n[profiling.logger]\nlevel = "%s"\nfile = "%s"\n' \
        "${field#PROFILE=}" "$OUT/logs/$name.profile"; } >"$dir/cubecl.toml"
    fi
  done
  idle=$(used_mib)
  samples="$OUT/logs/$name.gpu-mem"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$samples" &
  sampler=$!
  started=$SECONDS
  echo "=== $name: ${envs[*]} ${args[*]}"
  if [[ $name == parts* ]]; then
    (cd "$dir" && env "${envs[@]}" timeout "$limit" "$ROOT/.gpu/gpt2_parts" --backend cuda --pytorch python3 \
      --pytorch-script "$ROOT/benches/pytorch_gpt2_parts.py" "${args[@]}") \
      >"$OUT/logs/$name.log" 2>&1
  elif [[ $name == torch* ]]; then
    PYTHONUNBUFFERED=1 timeout "$limit" python3 benches/pytorch_gpt2.py --data .gpu/corpus.txt \
      --bpe .gpu/r50k_base.tiktoken --json-out "$OUT/logs/$name.json" "${args[@]}" >"$OUT/logs/$name.log" 2>&1
  else
    (cd "$dir" && env "${envs[@]}" timeout "$limit" "$ROOT/.gpu/gpt2_small_hybrid" --backend cuda --data "$ROOT/.gpu/corpus.txt" \
      --out "$RUNS/$name" --overwrite "${args[@]}") >"$OUT/logs/$name.log" 2>&1
  fi
  code=$?
  seconds=$((SECONDS - started))
  kill "$sampler" 2>/dev/null
  wait "$sampler" 2>/dev/null
  peak=$(sort -n "$samples" | tail -1)
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$seconds" "$code" "${peak:-?}" "$idle" >>"$OUT/summary.tsv"
  # The log's end: the example's summary, or the PyTorch result line.
  grep -v '^\s*$' "$OUT/logs/$name.log" | grep -v 'Compiling\|autotune' | tail -"$([[ $name == parts* ]] && echo 24 || echo 12)"
  # Metrics and validation curves only; checkpoints stay behind (gpt2-small's are 1.5 GB).
  if [ -d "$RUNS/$name" ]; then
    mkdir -p "$OUT/logs/$name"
    cp "$RUNS/$name"/*.jsonl "$RUNS/$name"/*.csv "$RUNS/$name"/*.svg "$OUT/logs/$name/" 2>/dev/null
    rm -rf "$RUNS/$name"
  fi
  save_results
done

# tokens/s of each case after its first 10 steps, as PyTorch's --skip 10: PyTorch's JSON
# line; for leanburn its step records (the summary's figure would include the first step).
python3 - "$OUT" <<'PY'
import glob, json, re, sys
out = sys.argv[1]
rows = [line.rstrip("\n").split("\t") for line in open(f"{out}/summary.tsv")][1:]

def speed(name, log):
    found = re.search(r'"tokens_per_s": ([0-9.]+)', log)
    if found:
        return float(found.group(1))
    records = [json.loads(l) for f in glob.glob(f"{out}/logs/{name}/metrics-*.jsonl") for l in open(f)][10:]
    seconds = sum(r["seconds"] for r in records)
    return sum(r["items"] for r in records) / seconds if seconds > 0 else None

print("| case | tokens/s (after 10 steps) | nvidia-smi peak (MiB) | first step | exit |")
print("|---|---|---|---|---|")
for name, seconds, code, peak, idle in rows:
    log = open(f"{out}/logs/{name}.log", errors="replace").read()
    tokens = speed(name, log)
    # The example's line: "first step of this process done in 4.1 s, 7.5 s after start".
    first = re.search(r"first step of this process done in [0-9.]+ s, ([0-9.]+ s) after start", log)
    print(f"| {name} | {f'{tokens:.0f}' if tokens else '-'} | {peak} | {first.group(1) + ' after start' if first else '-'} | {code} |")
PY

save_results
echo "cache: $(find "$CACHE" -type f | wc -l) files, $(du -sh "$CACHE" | cut -f1); results in $RESULTS:"
ls -la "$RESULTS"
cat "$OUT/summary.tsv"
