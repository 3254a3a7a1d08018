#!/usr/bin/env bash
# Runs the whole test suite, `cargo test --workspace --no-fail-fast` in effect, in two lanes
# so that both cores work.
#
# The binaries whose tests hold the one device lock (`tests/common::exclusive_device`) run
# their tests one at a time, mostly compiling kernels on one core; they run in the `device`
# lane while every other test target (unit tests, the other integration tests, of every
# workspace member) runs in the `suite` lane, followed by the doc tests and the lints
# (`cargo clippy --workspace --all-targets -- -D warnings`, then `cargo doc --workspace
# --no-deps` with rustdoc's warnings as errors), which so run beside the device
# lane's last minutes, when its one long binary leaves part of a core idle, instead of
# before both lanes: clippy checks every dependency anew (a build's artifacts are not a
# check's). Every line is tagged with its lane (`[device] `, `[suite] `, `[doc] `,
# `[lint] `), so `.ci/run` can time each binary.
#
# First it checks the formatting (`cargo fmt --all --check`, rustfmt.toml). The formatting
# and the lints are checked where their tool is installed (rustup is asked for clippy once),
# and the script says so where it is not.
#
# Exit status: non-zero when the formatting, the lints, the build or any test failed;
# every lane runs to its end.
# Extra arguments go to the test binaries (after `--`), e.g. `bash scripts/test.sh --nocapture`.
#
# `LEANBURN_TEST_TIMES=N` also times each test of the two lanes (libtest's `--report-time`;
# the device lane then runs one test at a time, which its lock mostly did already) and
# prints the N slowest at the end: where a lane's time goes, test by test (docs/ci.md).
# `--report-time` is unstable; libtest takes it where `RUSTC_BOOTSTRAP` is set, which is
# set for the test binaries alone, through cargo's runner: set for cargo, it would rebuild
# every crate (the variable is part of each build's fingerprint).
set -uo pipefail
cd "$(dirname "$0")/.."

device_lane=(vram_stability)

fmt_status=0
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all --check || { fmt_status=$?; echo "test.sh: not formatted; run cargo fmt --all" >&2; }
else
  echo "test.sh: rustfmt is not installed (rustup component add rustfmt); formatting not checked" >&2
fi

# Build everything `cargo test` builds (the examples too: the end-to-end tests run them),
# and read the integration-test targets from cargo's own listing.
build_log=$(mktemp)
trap 'rm -f "$build_log"' EXIT
cargo test --workspace --no-fail-fast --no-run 2>&1 | tee "$build_log"
[ "${PIPESTATUS[0]}" -eq 0 ] || exit 1

# CubeCL's autotune results for the tests' shapes (tests/autotune, scripts/autotune_seed.sh):
# a fresh machine then tunes only shapes the seed lacks, not every one (docs/ci.md).
bash scripts/autotune_seed.sh copy

mapfile -t targets < <(sed -n 's/^ *Executable tests\/.* (.*\/deps\/\(.*\)-[0-9a-f]*)$/\1/p' "$build_log" | sort -u)
for t in "${device_lane[@]}"; do
  printf '%s\n' "${targets[@]}" | grep -qx "$t" || { echo "test.sh: no test target named $t" >&2; exit 1; }
done
suite_args=(--lib --bins)
for t in "${targets[@]}"; do
  printf '%s\n' "${device_lane[@]}" | grep -qx "$t" || suite_args+=(--test "$t")
done
device_args=()
for t in "${device_lane[@]}"; do device_args+=(--test "$t"); done

extra=()
(($#)) && extra=(-- "$@")

# With LEANBURN_TEST_TIMES set, the lanes' output is kept for the slowest-tests list.
timed=0
times_log=/dev/null
device_extra=("${extra[@]}")
suite_extra=("${extra[@]}")
if [ "${LEANBURN_TEST_TIMES:-0}" -gt 0 ] 2>/dev/null; then
  timed=1
  times_log=$(mktemp)
  trap 'rm -f "$build_log" "$times_log"' EXIT
  host=$(rustc -vV | sed -n 's/^host: //p' | tr 'a-z-' 'A-Z_')
  export "CARGO_TARGET_${host}_RUNNER=env RUSTC_BOOTSTRAP=1"
  suite_extra=(-- -Zunstable-options --report-time "$@")
  # The device lane's tests take turns at one lock, and libtest's clock starts before the
  # wait: one at a time, each test's time is its own.
  device_extra=(-- -Zunstable-options --report-time --test-threads=1 "$@")
fi

# One lane: cargo's output, each line tagged as it comes.
lane() {
  local tag=$1
  shift
  cargo test --workspace --no-fail-fast "$@" 2>&1 | sed -u "s/^/[$tag] /" | tee -a "$times_log"
  return "${PIPESTATUS[0]}"
}

# The lints, tagged like a lane; sets clippy_status.
lints() {
  clippy_status=0
  rustdoc_status=0
  cargo clippy --version >/dev/null 2>&1 || timeout 120 rustup component add clippy >/dev/null 2>&1
  if ! cargo clippy --version >/dev/null 2>&1; then
    echo "test.sh: clippy is not installed (rustup component add clippy); lints not checked" >&2
    return
  fi
  local start=$SECONDS
  cargo clippy --workspace --all-targets -- -D warnings 2>&1 | sed -u "s/^/[lint] /"
  clippy_status=${PIPESTATUS[0]}
  ((clippy_status == 0)) || echo "test.sh: clippy found warnings" >&2
  echo "test.sh: clippy took $((SECONDS - start)) s"
  # The API docs (`cargo doc`): no broken or private intra-doc links in what users read.
  start=$SECONDS
  RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps 2>&1 | sed -u "s/^/[lint] /"
  rustdoc_status=${PIPESTATUS[0]}
  ((rustdoc_status == 0)) || echo "test.sh: rustdoc found warnings (RUSTDOCFLAGS=\"-D warnings\" cargo doc --workspace --no-deps)" >&2
  echo "test.sh: rustdoc took $((SECONDS - start)) s"
}

lane device "${device_args[@]}" "${device_extra[@]}" &
device_pid=$!
lane suite "${suite_args[@]}" "${suite_extra[@]}"
suite_status=$?
lane doc --doc "${extra[@]}"
doc_status=$?
lints
wait "$device_pid"
device_status=$?

bash scripts/autotune_seed.sh report

if ((timed)); then
  echo "test.sh: the $LEANBURN_TEST_TIMES slowest tests (seconds; both lanes ran at once, so each shares the cores)"
  sed -n 's/^\[\(device\|suite\)\] test \(.*\) \.\.\. .* <\([0-9.]*\)s>$/\3 [\1] \2/p' "$times_log" |
    sort -rn | head -n "$LEANBURN_TEST_TIMES" | awk '{ printf "test.sh: %8.1f  %s\n", $1, substr($0, index($0, " ") + 1) }'
fi

echo "test.sh: exit status fmt ${fmt_status}, clippy ${clippy_status}, rustdoc ${rustdoc_status}, device ${device_status}, suite ${suite_status}, doc ${doc_status}"
[ "$fmt_status" -eq 0 ] && [ "$clippy_status" -eq 0 ] && [ "$rustdoc_status" -eq 0 ] && [ "$device_status" -eq 0 ] && [ "$suite_status" -eq 0 ] && [ "$doc_status" -eq 0 ]
