#!/usr/bin/env bash
# benches/conv on a CUDA machine, in one device call: `Lean` against stock Burn over
# ResNet-50's convolution shapes and the large ones, on Burn's fused stack and on the
# unfused CubeBackend, in f32 and bf16: time, reserve rise, `Lean`'s workspace and its
# error against stock (the bench exits 1 when a shape is over its tolerance). The GPU
# table of docs/benchmarks.md ("benches/conv") comes from this script.
#
# Built elsewhere and staged in .gpu/ (optionally gzipped; see docs/benchmarks.md):
#   .gpu/conv     `cargo build --release --features cuda --bench conv`, then
#                 strip -o .gpu/conv target/release/deps/conv-<hash> (the newest one)
#
#   bash benches/gpu_conv.sh                       # f32 and bf16, batch 32, all shapes
#   DTYPES=f32 BATCH=8 bash benches/gpu_conv.sh --only 3x3    # extra arguments go to conv
#
# Settings: DTYPES (default "f32 bf16"), BATCH (ResNet-50 shapes' batch, default 32),
# LIMIT (seconds per precision, default 280), BACKEND (default cuda; `wgpu
# --allow-software` runs the script itself on a machine without a GPU). Results under
# $OUT (default ./gpu-out): conv-<dtype>.md (the tables), logs/conv-<dtype>.log (progress
# and exit status), the kernel cache as cubecl-cache.tar.gz.part* (benches/gpu_setup.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$PWD/gpu-out}
. benches/gpu_setup.sh
chmod +x .gpu/conv

status=0
for dtype in ${DTYPES:-f32 bf16}; do
  echo "=== conv, $dtype"
  # shellcheck disable=SC2086 # BACKEND may carry a flag of its own
  (cd "$WORK" && timeout "${LIMIT:-280}" "$ROOT/.gpu/conv" --backend ${BACKEND:-cuda} --set all \
    --batch "${BATCH:-32}" --dtype "$dtype" --reps 5 --warmup 2 "$@") \
    >"$OUT/conv-$dtype.md" 2>"$OUT/logs/conv-$dtype.log"
  code=$?
  echo "exit $code" >>"$OUT/logs/conv-$dtype.log"
  [ "$code" -ne 0 ] && status=$code && tail -5 "$OUT/logs/conv-$dtype.log"
  cat "$OUT/conv-$dtype.md"
done
save_kernel_cache
exit "$status"
