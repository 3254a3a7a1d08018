#!/usr/bin/env bash
# The test suite's autotune seed: CubeCL's autotune results for the shapes the tests run on
# llvmpipe, kept in `tests/autotune/` so that a fresh machine (CI's) does not compile and time
# every candidate kernel of every matmul, reduction and fused kernel anew (most of a cold
# run's time; docs/ci.md).
#
#   bash scripts/autotune_seed.sh copy      adds the seed's files that target/autotune lacks
#                                           (never overwrites a machine's own results);
#                                           scripts/test.sh runs this before the tests
#   bash scripts/autotune_seed.sh refresh   replaces the seed with target/autotune, then
#                                           runs `prefer` on it
#   bash scripts/autotune_seed.sh prefer    makes each matmul result of the seed choose the
#                                           simple unit matmul with the largest tile (the
#                                           smallest kernel) where it was measured (below);
#                                           needs jq
#   bash scripts/autotune_seed.sh report    counts the results in target/autotune that the
#                                           seed lacks; scripts/test.sh runs this last
#
# To make the seed anew (after the tests' shapes or CubeCL's version changed):
#   rm -rf target/autotune tests/autotune && bash scripts/test.sh && bash scripts/autotune_seed.sh refresh
#
# The seed only says which candidate each shape runs; every test still checks the kernels
# that run. For CubeCL's matmul it does not keep the candidate that ran fastest on
# llvmpipe: `prefer` makes every result whose measurements include the simple unit matmul
# with the largest register tile (`matmul_simple_unit_max_tile_size`) choose that one. On
# llvmpipe a test's matmul runs in microseconds and compiles in seconds, and the usual
# winner, the same matmul with the smallest tile, unrolls into about 10,000 lines of WGSL
# against about 1,800 (docs/ci.md, "The seed's matmul choice"). Every candidate computes the
# same product; users' machines tune for themselves and never read the seed. A shape
# missing from the seed is tuned as before; a CubeCL version other than the seed's reads
# another directory and tunes everything.
set -euo pipefail
cd "$(dirname "$0")/.."

seed=tests/autotune
cache=target/autotune

case "${1:-}" in
  copy)
    [ -d "$seed" ] || { echo "autotune_seed: no $seed; nothing to copy"; exit 0; }
    copied=0
    kept=0
    while IFS= read -r -d '' file; do
      to="$cache/${file#"$seed"/}"
      if [ -e "$to" ]; then
        kept=$((kept + 1))
      else
        mkdir -p "$(dirname "$to")"
        cp "$file" "$to"
        copied=$((copied + 1))
      fi
    done < <(find "$seed" -type f -name '*.json.log' -print0)
    echo "autotune_seed: $copied seed files copied into $cache, $kept already there kept"
    if [ "$kept" -gt 0 ]; then
      echo "autotune_seed: a kept file's shapes that the seed has and it lacks are tuned here anew" \
        "(slowly on llvmpipe); rm -rf $cache first to start from the seed (docs/ci.md)"
    fi
    ;;
  refresh)
    [ -d "$cache" ] || { echo "autotune_seed: no $cache: run the tests first" >&2; exit 1; }
    rm -rf "$seed"
    mkdir -p "$seed"
    cp -R "$cache/." "$seed/"
    echo "autotune_seed: $seed now holds $(cat "$seed"/*/*/*.json.log | wc -l) results"
    bash "$0" prefer
    ;;
  prefer)
    command -v jq >/dev/null || { echo "autotune_seed: prefer needs jq" >&2; exit 1; }
    want=matmul_simple_unit_max_tile_size
    changed=0
    while IFS= read -r -d '' file; do
      before=$(cat "$file")
      jq -c --arg want "$want" '
        ([.value.results[].outcome.Ok? // empty | select(.name == $want) | .index] | first) as $index
        | if $index == null then . else .value.fastest_index = $index end' <<<"$before" >"$file"
      changed=$((changed + $(diff <(echo "$before") "$file" | grep -c '^>' || true)))
    done < <(find "$seed" -type f -name 'burn_cubecl-kernel-matmul-tune-base.json.log' -print0)
    echo "autotune_seed: $changed matmul results in $seed changed to $want"
    ;;
  report)
    # Results in target/autotune that the seed lacks: shapes this machine had to tune.
    [ -d "$seed" ] && [ -d "$cache" ] || exit 0
    extra=$(comm -13 <(find "$seed" -type f -name '*.json.log' -exec cat {} + | sort) \
      <(find "$cache" -type f -name '*.json.log' -exec cat {} + | sort) | grep -c . || true)
    if [ "$extra" -eq 0 ]; then
      echo "autotune_seed: every tuned shape came from the seed"
    else
      echo "autotune_seed: $extra results in $cache are not in the seed (tuned here, or this machine's own); a new test's shapes? make the seed anew: see scripts/autotune_seed.sh"
    fi
    ;;
  *)
    echo "usage: bash scripts/autotune_seed.sh copy|refresh|prefer|report" >&2
    exit 2
    ;;
esac
