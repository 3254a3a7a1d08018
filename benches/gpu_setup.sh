# Sourced by the benches/gpu_*.sh scripts before they run anything on a CUDA machine.
# Expects ROOT (the repository) and OUT (the results folder). Unpacks the gzipped files
# staged in .gpu/, keeps CubeCL's compiled kernels and autotune results in one folder
# (CACHE: restored from .gpu/cubecl-cache.tar.gz.part* or .gpu/cubecl-cache.tar when they
# exist, saved with save_kernel_cache), writes a cubecl.toml pointing there into WORK (run the binaries
# from WORK), puts every folder holding NVRTC or cuBLASLt on the library path, and records the
# machine in $OUT/logs/environment.txt.
#
# CubeCL compiles every kernel with NVRTC on first use and autotunes matmuls, reductions
# and fused kernels; on a fresh machine that cold start takes minutes. AUTOTUNE (default
# balanced, Burn's own default) sets CubeCL's autotune level: minimal | balanced |
# extensive | full.
RUNS=/tmp/leanburn-runs
WORK=/tmp/leanburn-work
CACHE=/tmp/cubecl-cache
mkdir -p "$OUT/logs" "$RUNS" "$WORK" "$CACHE"
for packed in .gpu/*.gz; do
  [ -e "$packed" ] && gunzip -f "$packed"
done
[ -e .gpu/cubecl-cache.tar ] && tar -C "$CACHE" -xf .gpu/cubecl-cache.tar
# A leanburn kernel cache (../shared/gpu-cache/leanburn-cache-*.tar.gz: one folder lbcache/
# whose cubecl/ is what CubeCL keeps), copied into CACHE unless CACHE already has kernels:
# a second call on a machine still warm keeps the newer cache the first one wrote (copied
# over it, the older one cost the second call of 2026-11-30 its compiled kernels).
for packed in .gpu/leanburn-cache-*.tar; do
  [ -e "$packed" ] || continue
  [ -n "$(find "$CACHE" -type f -print -quit)" ] && break
  tar -C /tmp -xf "$packed" && cp -r /tmp/lbcache/cubecl/. "$CACHE"/
done
if compgen -G '.gpu/cubecl-cache.tar.gz.part*' >/dev/null; then
  cat .gpu/cubecl-cache.tar.gz.part* | tar -C "$CACHE" -xzf -
fi
cat >"$WORK/cubecl.toml" <<TOML
[compilation]
cache = { file = "$CACHE" }

[autotune]
level = "${AUTOTUNE:-balanced}"
cache = { file = "$CACHE" }
TOML

# NVRTC (cubecl-cuda compiles kernels at run time) and cuBLASLt (leanburn's GEMMs) may live
# in the toolkit or in pip's nvidia-* packages; put every directory holding them on the
# library path.
library_dirs() {
  find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/lib/x86_64-linux-gnu \
    /opt/torch/.venv/lib/python3*/site-packages/nvidia -name "$1" -not -path '*/stubs/*' -printf '%h\n' 2>/dev/null | sort -u | paste -sd:
}
nvrtc_dirs=$(library_dirs 'libnvrtc.so*')
cublaslt_dirs=$(library_dirs 'libcublasLt.so*')
export LD_LIBRARY_PATH="${nvrtc_dirs}${cublaslt_dirs:+:$cublaslt_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  echo "nvrtc: ${nvrtc_dirs:-not found}"
  echo "cublasLt: ${cublaslt_dirs:-not found}"
  echo "autotune level: ${AUTOTUNE:-balanced}; cached kernels at start: $(find "$CACHE" -type f | wc -l) files"
  python3 -c 'import torch; print("torch", torch.__version__)' 2>&1
} | tee "$OUT/logs/environment.txt"

# Packs the kernel cache into $OUT/cubecl-cache.tar.gz.part00, part01, ... of 15 MiB each
# (the device tool brings back files of up to 16 MiB, eight at most), so a later session
# can carry them in .gpu/ and start warm. A cold gpt2-small step took longer than 330 s on
# an H100 (docs/benchmarks.md), more than a session can spend twice.
save_kernel_cache() {
  echo "cache: $(find "$CACHE" -type f | wc -l) files, $(du -sh "$CACHE" | cut -f1)"
  tar -C "$CACHE" -czf - . | split -b 15m -d -a 2 - "$OUT/cubecl-cache.tar.gz.part"
  ls -la "$OUT"/cubecl-cache.tar.gz.part*
}
