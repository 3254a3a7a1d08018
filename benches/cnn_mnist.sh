#!/usr/bin/env bash
# The trainer's strategies on the CNN example over MNIST (issue 42's CNN rows), run by
# hand: for each seed, the same initial weights and batch stream (the example's --seed)
# in six runs, one after the other (nothing else should run meanwhile: the table compares
# training seconds):
#   full      all-full steps, the example's warmup + cosine schedule over STEPS
#   short     all-full over 0.8 × STEPS, its schedule fully decayed in them
#   hybrid    the default hybrid mode (extrapolated, verified jumps)
#   select    all-full, the highest-loss half of each batch from 50% to 90% of the run
#   average   all-full with a moving average of the weights (decay 0.99 from half-way,
#             batch norm's statistics recomputed with 4 passes), verified at each
#             evaluation; the better weights are validated
#   select+average
#   hybrid+select   the hybrid mode with the selection above on its full steps (not in
#             the default RUNS)
#   infobatch all-full with InfoBatch (--info-batch 0.5: from the second epoch each epoch
#             leaves out half of the images whose last loss was below the mean and
#             weighs up the other half; every epoch whole from 87.5% of the steps)
#   infobatch-short   the same over 0.8 × STEPS, its schedule fully decayed in them
#             (these two not in the default RUNS)
#   lookahead the average above, with each verdict for it pulling the live weights half
#             the way to it (--average-pull 0.5; not in the default RUNS)
# Then a table per seed and over the seeds: final validation loss and accuracy, training
# seconds (evaluation excluded, verification included), and the time to first reach the
# full run's final accuracy and final loss, relative to the full run's own.
#
#   cargo build --release --example cnn_shapes_hybrid
#   bash benches/cnn_mnist.sh ../shared/data/mnist-10k
#   bash benches/cnn_mnist.sh shapes        # the example's generated shapes instead
#
# Settings: SEEDS (default "1 2 3"), STEPS (600), BATCH (32), EVAL_EVERY (25),
# EVAL_BATCHES (16: 512 held-out images), OUT (default runs/cnn-mnist), RUNS (default
# all six), BACKEND (default cpu), REUSE (non-empty: keep runs already in OUT, to add a
# run kind to a finished table).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:?usage: bash benches/cnn_mnist.sh DIR-WITH-IDX-FILES|shapes}
BIN=target/release/examples/cnn_shapes_hybrid
[ -x "$BIN" ] || { echo "build first: cargo build --release --example cnn_shapes_hybrid" >&2; exit 2; }
SEEDS=${SEEDS:-1 2 3}
STEPS=${STEPS:-600}
SHORT=$((STEPS * 8 / 10))
OUT=${OUT:-runs/cnn-mnist}
RUNS=${RUNS:-full short hybrid select average select+average}
data=(--data "$DATA")
[ "$DATA" = shapes ] && data=()
common=(--backend "${BACKEND:-cpu}" "${data[@]}" --batch "${BATCH:-32}" --eval-every "${EVAL_EVERY:-25}"
        --eval-batches "${EVAL_BATCHES:-16}" --checkpoint-every "$STEPS" --overwrite)
average=(--average 0.99 --average-from 0.5 --average-stat-passes 4)
select=(--select-keep 0.5 --select-range 0.5,0.9)

for seed in $SEEDS; do
  for run in $RUNS; do
    case $run in
      full) args=(--mode full --steps "$STEPS") ;;
      short) args=(--mode full --steps "$SHORT") ;;
      hybrid) args=(--mode hybrid --steps "$STEPS") ;;
      select) args=(--mode full --steps "$STEPS" "${select[@]}") ;;
      average) args=(--mode full --steps "$STEPS" "${average[@]}") ;;
      select+average) args=(--mode full --steps "$STEPS" "${select[@]}" "${average[@]}") ;;
      hybrid+select) args=(--mode hybrid --steps "$STEPS" "${select[@]}") ;;
      lookahead) args=(--mode full --steps "$STEPS" "${average[@]}" --average-pull 0.5) ;;
      infobatch) args=(--mode full --steps "$STEPS" --info-batch 0.5) ;;
      infobatch-short) args=(--mode full --steps "$SHORT" --info-batch 0.5) ;;
      *) echo "unknown run $run" >&2; exit 2 ;;
    esac
    dir="$OUT/seed$seed/$run"
    mkdir -p "$OUT/seed$seed"
    if [ -n "${REUSE:-}" ] && compgen -G "$dir/validation-*.csv" > /dev/null; then
      echo "=== seed $seed, $run: reused" >&2
      continue
    fi
    echo "=== seed $seed, $run" >&2
    "$BIN" "${common[@]}" --seed "$seed" --out "$dir" "${args[@]}" > "$dir.log" 2>&1 \
      || { echo "seed $seed, $run failed: $dir.log" >&2; exit 1; }
    tail -n 8 "$dir.log" | head -n 3 >&2
  done
done

python3 - "$OUT" "$SEEDS" "$RUNS" <<'PY'
import csv, glob, os, statistics, sys
out, seeds, runs = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()

def points(seed, run):
    [path] = glob.glob(os.path.join(out, f"seed{seed}", run, "validation-*.csv"))
    with open(path) as f:
        return [(int(r["step"]), float(r["train_seconds"]), float(r["validation_loss"]),
                 float(r["validation_accuracy"]), r.get("weights", "")) for r in csv.DictReader(f)]

def reached(ps, ok):
    return next((p[1] for p in ps if p[0] > 0 and ok(p)), None)

ratios = {run: {"loss": [], "acc": [], "time_loss": [], "time_acc": [], "secs": []} for run in runs}
print("| seed | run | val loss | accuracy | train s | to full's accuracy (× full's) | to full's loss (× full's) | average chosen |")
print("|---|---|---|---|---|---|---|---|")
for seed in seeds:
    full = points(seed, "full")
    acc_target, loss_target = full[-1][3], full[-1][2]
    full_acc = reached(full, lambda p: p[3] >= acc_target)
    full_loss = reached(full, lambda p: p[2] <= loss_target)
    for run in runs:
        ps = points(seed, run)
        last = ps[-1]
        t_acc = reached(ps, lambda p: p[3] >= acc_target)
        t_loss = reached(ps, lambda p: p[2] <= loss_target)
        chosen = sum(p[4] == "average" for p in ps)
        fmt = lambda t, f: "not reached" if t is None else f"{t:.1f} s ({t / f:.2f}×)"
        print(f"| {seed} | {run} | {last[2]:.4f} | {100 * last[3]:.1f}% | {last[1]:.1f} | {fmt(t_acc, full_acc)} | "
              f"{fmt(t_loss, full_loss)} | {chosen if any(p[4] for p in ps) else '-'} |")
        r = ratios[run]
        r["loss"].append(last[2] / loss_target); r["acc"].append(last[3]); r["secs"].append(last[1] / full[-1][1])
        r["time_acc"].append(None if t_acc is None else t_acc / full_acc)
        r["time_loss"].append(None if t_loss is None else t_loss / full_loss)

print("\nOver the seeds (means; a time ratio only over the seeds that reached the target):\n")
print("| run | val loss / full's | accuracy | train s / full's | time to full's accuracy | reached | time to full's loss | reached |")
print("|---|---|---|---|---|---|---|---|")
for run in runs:
    r = ratios[run]
    def mean_of(xs):
        xs = [x for x in xs if x is not None]
        return (f"{statistics.mean(xs):.2f}×" if xs else "-"), f"{len(xs)}/{len(r['loss'])}"
    ta, na = mean_of(r["time_acc"]); tl, nl = mean_of(r["time_loss"])
    print(f"| {run} | {statistics.mean(r['loss']):.3f} | {100 * statistics.mean(r['acc']):.2f}% | "
          f"{statistics.mean(r['secs']):.2f} | {ta} | {na} | {tl} | {nl} |")
PY
