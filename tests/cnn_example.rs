//! The conv-net example and the soak example as a user runs them: both modes end to end
//! with their files and a resume (hybrid on wgpu, llvmpipe in CI; the full run and its
//! resume on the CPU backend), the soak's verdict on wgpu, and bad input refused with
//! exit status 2.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

mod common;

use common::{example, output_text as text};

fn scratch(name: &str) -> PathBuf {
    common::scratch(&format!("cnn_example-{name}"))
}

/// A small run with `extra` arguments on `backend`: `wgpu` (software adapters allowed,
/// llvmpipe in CI) where leanburn's kernels on the real CubeCL runtime are what is
/// tested, `cpu` where the run only has to train (resume, refusals), which takes a
/// fraction of the time: each wgpu process compiles its kernels anew.
fn small_run_on(backend: &str, out: &Path, extra: &[&str]) -> Output {
    let mut command = example("cnn_shapes_hybrid");
    command.args(["--backend", backend, "--allow-software"]);
    // Small images and two blocks unless the case sets its own.
    for (flag, value) in [("--resolution", "16"), ("--widths", "8,16")] {
        if !extra.contains(&flag) {
            command.args([flag, value]);
        }
    }
    command.args(["--batch", "4", "--eval-every", "3", "--eval-batches", "1", "--checkpoint-every", "3"]);
    command.arg("--out").arg(out).args(extra);
    command.output().unwrap()
}

fn small_run(out: &Path, extra: &[&str]) -> Output {
    small_run_on("wgpu", out, extra)
}

fn cpu_run(out: &Path, extra: &[&str]) -> Output {
    small_run_on("cpu", out, extra)
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn assert_fails(output: &Output, needle: &str) {
    let all = text(output);
    assert_eq!(output.status.code(), Some(2), "{all}");
    assert!(String::from_utf8_lossy(&output.stderr).contains(needle), "stderr lacks {needle:?}:\n{all}");
}

#[test]
fn both_modes_run_write_accuracy_and_a_plot_and_resume() {
    let out = scratch("modes");
    let full = cpu_run(&out, &["--mode", "full", "--steps", "6"]);
    assert!(full.status.success(), "{}", text(&full));
    assert_eq!(read(&out.join("metrics-full.jsonl")).lines().count(), 6);
    // The resolved options, as `--config` reads them back.
    let config: serde_json::Value = serde_json::from_str(&read(&out.join("config-full.json"))).unwrap();
    assert_eq!((&config["backend"], &config["steps"], &config["mode"]), (&"cpu".into(), &"6".into(), &"full".into()));
    let validation = read(&out.join("validation-full.csv"));
    let rows: Vec<&str> = validation.lines().collect();
    assert_eq!(rows[0], "step,train_seconds,validation_loss,validation_accuracy");
    // Header, step 0, steps 3 and 6; accuracy is a fraction.
    assert_eq!(rows.len(), 4, "{validation}");
    let accuracy: f64 = rows[3].split(',').nth(3).unwrap().parse().unwrap();
    assert!((0.0..=1.0).contains(&accuracy), "{validation}");
    let stdout = String::from_utf8_lossy(&full.stdout);
    assert!(stdout.contains("accuracy") && stdout.contains("checkpoint of step 6"), "{}", text(&full));

    let hybrid = small_run(&out, &["--mode", "hybrid", "--steps", "12", "--warmup", "2"]);
    assert!(hybrid.status.success(), "{}", text(&hybrid));
    let metrics = read(&out.join("metrics-hybrid.jsonl"));
    // A block was judged on the runtime (kept or rolled back, its probe gain recorded).
    assert!(metrics.contains("\"gain\":"), "hybrid mode tried no predict block:\n{metrics}");
    // Whatever phase step 12 fell in, the run ends validated and saved at step 12.
    assert!(String::from_utf8_lossy(&hybrid.stdout).contains("checkpoint of step 12"), "{}", text(&hybrid));
    assert!(read(&out.join("validation-hybrid.csv")).lines().last().unwrap().starts_with("12,"));
    let plot = read(&out.join("cnn.svg"));
    assert!(plot.contains("hybrid validation") && plot.contains("full validation"), "both modes in the plot");

    let resumed = cpu_run(&out, &["--mode", "full", "--steps", "8", "--resume"]);
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert_eq!(read(&out.join("metrics-full.jsonl")).lines().count(), 8);
}

#[test]
fn bad_input_is_refused_and_overwrites_nothing() {
    let out = scratch("bad");
    assert_fails(&cpu_run(&out, &["--resolution", "4"]), "--resolution");
    assert_fails(&cpu_run(&out, &["--widths", "8,16,32,64", "--resolution", "8"]), "too small for 4 blocks");
    assert_fails(&cpu_run(&out, &["--widths", "8,0"]), "--widths");
    assert_fails(&cpu_run(&out, &["--lr", "0"]), "--lr");
    assert_fails(&cpu_run(&out, &["--resume"]), "no hybrid checkpoint");

    let first = cpu_run(&out, &["--mode", "full", "--steps", "3"]);
    assert!(first.status.success(), "{}", text(&first));
    let metrics = read(&out.join("metrics-full.jsonl"));
    assert_fails(&cpu_run(&out, &["--mode", "full", "--steps", "3"]), "already holds a full run");
    assert_eq!(read(&out.join("metrics-full.jsonl")), metrics, "a refused run must not touch the files");
}

/// `--devices 0,0`: two data-parallel replicas on the CPU's one device (two logical
/// devices) train a hybrid run, replica 0 alone writing the step records and checkpoints,
/// and resume; devices that do not exist are refused before anything runs.
#[test]
fn two_replicas_train_and_resume_as_one_run() {
    let out = scratch("parallel");
    let parallel = cpu_run(&out, &["--devices", "0,0", "--mode", "hybrid", "--steps", "8", "--warmup", "2"]);
    assert!(parallel.status.success(), "{}", text(&parallel));
    let all = text(&parallel);
    assert!(all.contains("on each of 2 replicas (effective batch 8)"), "{all}");
    assert!(String::from_utf8_lossy(&parallel.stdout).contains("checkpoint of step 8"), "{all}");
    // One record per step (replica 1 writes none); a block was judged.
    let metrics = read(&out.join("metrics-hybrid.jsonl"));
    assert_eq!(metrics.lines().count(), 8, "{metrics}");
    assert!(metrics.contains("\"gain\":"), "no predict block was judged:\n{metrics}");

    let resumed = cpu_run(&out, &["--devices", "0,0", "--mode", "hybrid", "--steps", "10", "--resume"]);
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert_eq!(read(&out.join("metrics-hybrid.jsonl")).lines().count(), 10);

    let missing = cpu_run(&scratch("parallel-missing"), &["--devices", "0,1"]);
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing));
    assert!(
        text(&missing).contains("the CPU backend has one device, 0, but device 1 was requested"),
        "{}",
        text(&missing)
    );
    assert!(!scratch("parallel-missing").join("metrics-hybrid.jsonl").exists());
    assert_fails(&cpu_run(&scratch("parallel-both"), &["--devices", "0,0", "--device", "0"]), "cannot be used with");
}

/// `--net resnet18` trains, on `Lean`'s convolutions and with `--conv stock` on Burn's
/// (the stack's name in the summary tells which ran), and is refused below the
/// resolution its four stages need.
#[test]
fn resnet18_trains_on_either_convolution_path() {
    let out = scratch("resnet");
    let net = ["--net", "resnet18", "--widths", "4,8,8,8", "--resolution", "32", "--mode", "full", "--steps", "3"];
    let lean = cpu_run(&out.join("lean"), &net);
    assert!(lean.status.success(), "{}", text(&lean));
    let stdout = String::from_utf8_lossy(&lean.stdout);
    assert!(stdout.contains("ResNet-18-style net (stage widths [4, 8, 8, 8])"), "{}", text(&lean));
    assert!(stdout.contains("on autodiff<lean<"), "the default path is Lean's: {}", text(&lean));
    assert_eq!(read(&out.join("lean/metrics-full.jsonl")).lines().count(), 3);

    let stock = cpu_run(&out.join("stock"), &[&net[..], &["--conv", "stock"]].concat());
    assert!(stock.status.success(), "{}", text(&stock));
    let stdout = String::from_utf8_lossy(&stock.stdout);
    assert!(stdout.contains("ResNet-18-style net") && !stdout.contains("lean<"), "{}", text(&stock));

    let too_small = cpu_run(&out.join("small"), &["--net", "resnet18", "--widths", "4,8,8,8", "--resolution", "16"]);
    assert_fails(&too_small, "too small for 4 stages");
}

#[test]
fn the_soak_prints_the_report_and_a_flat_verdict() {
    let mut command = example("vram_soak");
    command.args(["--backend", "wgpu", "--allow-software", "--model", "cnn", "--resolution", "16"]);
    command.args(["--batch", "4", "--steps", "60", "--settle", "20"]);
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("memory report") && stdout.contains("verdict over steps 20..60: flat"),
        "{}",
        text(&output)
    );

    let mut command = example("vram_soak");
    command.args(["--backend", "cpu", "--steps", "10", "--settle", "10"]);
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
}

/// `--resume` continues from the run's saved options; a changed image size or net is
/// refused by name, and the same values resume.
#[test]
fn a_resume_refuses_another_image_size_or_net() {
    let out = scratch("resume-options");
    let first = cpu_run(&out, &["--mode", "full", "--steps", "3"]);
    assert!(first.status.success(), "{}", text(&first));
    let bare = |extra: &[&str]| {
        let mut command = example("cnn_shapes_hybrid");
        command.args(["--backend", "cpu", "--mode", "full", "--resume", "--out"]).arg(&out).args(extra);
        command.output().unwrap()
    };
    for (flag, value) in [("--resolution", "32"), ("--widths", "8,32"), ("--net", "resnet18")] {
        assert_fails(&bare(&["--steps", "5", flag, value]), &format!("the run was started with {flag}"));
    }
    assert_eq!(read(&out.join("metrics-full.jsonl")).lines().count(), 3, "nothing trained");
    // Control: the same values, and none at all, resume.
    let same = bare(&["--steps", "4", "--resolution", "16", "--widths", "8,16"]);
    assert!(same.status.success(), "{}", text(&same));
    let bare_resume = bare(&["--steps", "5"]);
    assert!(bare_resume.status.success(), "{}", text(&bare_resume));
    assert_eq!(read(&out.join("metrics-full.jsonl")).lines().count(), 5);
}

/// `--data DIR`: an IDX pair (MNIST's format) is trained on, one channel, ten classes, the
/// last images held out; broken files are refused before anything runs.
#[test]
fn idx_images_train_in_place_of_shapes() {
    let data = scratch("idx-data");
    common::write_idx_pair(&data, 120);
    let out = scratch("idx-run");
    let data_arg = data.to_str().unwrap();
    let run = cpu_run(&out, &["--mode", "full", "--steps", "6", "--data", data_arg]);
    assert!(run.status.success(), "{}", text(&run));
    let summary = String::from_utf8_lossy(&run.stdout);
    assert!(summary.contains("on the IDX images in"), "{}", text(&run));
    assert!(String::from_utf8_lossy(&run.stderr).contains("of 16×16 images"), "{}", text(&run));
    assert_eq!(read(&out.join("metrics-full.jsonl")).lines().count(), 6);
    // Control: without --data the run is on shapes.
    let shapes = cpu_run(&scratch("idx-control"), &["--mode", "full", "--steps", "1"]);
    assert!(String::from_utf8_lossy(&shapes.stdout).contains("on shapes"), "{}", text(&shapes));
    // A truncated image file, and a directory without a pair, are bad input.
    let images = fs::read(data.join("images-idx3-ubyte")).unwrap();
    fs::write(data.join("images-idx3-ubyte"), &images[..images.len() - 5]).unwrap();
    assert_fails(&cpu_run(&scratch("idx-bad"), &["--data", data_arg]), "pixel bytes");
    assert_fails(&cpu_run(&scratch("idx-none"), &["--data", out.to_str().unwrap()]), "no IDX pair");
}

/// `--average` and `--select-keep` on the CNN: each validation after the average starts
/// is preceded by a verification, the log says which weights were validated, and the
/// selected steps train on half of each batch.
#[test]
fn the_weight_average_is_verified_and_selection_trains_on_half() {
    let out = scratch("average");
    let run = cpu_run(
        &out,
        &[
            "--mode",
            "full",
            "--steps",
            "6",
            "--average",
            "0.5",
            "--average-from",
            "0",
            "--average-stat-passes",
            "2",
            "--select-keep",
            "0.5",
            "--select-range",
            "0,1",
        ],
    );
    assert!(run.status.success(), "{}", text(&run));
    let validation = read(&out.join("validation-full.csv"));
    let rows: Vec<&str> = validation.lines().collect();
    assert_eq!(rows[0], "step,train_seconds,validation_loss,validation_accuracy,weights", "{validation}");
    assert!(rows[1].ends_with(",live"), "before any verification the live weights: {validation}");
    let verified = String::from_utf8_lossy(&run.stderr).matches("weight average ").count();
    assert_eq!(verified, 2, "a verification before the validations at steps 3 and 6:\n{}", text(&run));
    let metrics = read(&out.join("metrics-full.jsonl"));
    assert_eq!(metrics.matches("\"selection\":{\"scored\":4,\"kept\":2}").count(), 6, "{metrics}");
    // Out-of-range settings are bad input (the control above: without --average the log
    // has no `weights` column, as `both_modes_run_write_accuracy_and_a_plot_and_resume` reads).
    assert_fails(&cpu_run(&scratch("average-bad"), &["--average", "1.5"]), "--average");
    assert_fails(&cpu_run(&scratch("average-pull"), &["--average", "0.9", "--average-pull", "2"]), "pull");
    assert_fails(&cpu_run(&scratch("select-bad"), &["--select-keep", "0"]), "--select-keep");
}

/// `--info-batch`: from the second epoch the images learned (a last loss below the mean)
/// are left out at the ratio, and the summary says how many; what it cannot follow is
/// refused before anything runs.
#[test]
fn info_batch_leaves_learned_images_out_and_refuses_what_it_cannot_follow() {
    let data = scratch("info-batch-data");
    common::write_idx_pair(&data, 120);
    let data_arg = data.to_str().unwrap();
    // 116 training images in batches of 4: 29 steps an epoch; no annealing before step 80.
    let base = ["--mode", "full", "--steps", "80", "--data", data_arg];
    let pruning = [&base[..], &["--info-batch", "0.5", "--info-batch-anneal", "1"]].concat();
    let run = cpu_run(&scratch("info-batch"), &pruning);
    assert!(run.status.success(), "{}", text(&run));
    let stdout = String::from_utf8_lossy(&run.stdout);
    let line = stdout.lines().find(|l| l.starts_with("InfoBatch: ")).unwrap_or_else(|| panic!("{}", text(&run)));
    let left_out: usize = line["InfoBatch: ".len()..].split(' ').next().unwrap().parse().unwrap();
    assert!(left_out > 0 && line.contains("epochs pruned"), "{line}");
    // Control: without it nothing is left out, and the summary has no such line.
    let plain = cpu_run(&scratch("info-batch-control"), &base);
    assert!(plain.status.success() && !String::from_utf8_lossy(&plain.stdout).contains("InfoBatch"));
    let data_flags = ["--steps", "80", "--data", data_arg, "--info-batch", "0.5"];
    let refused = |extra: &[&str], needle: &str| {
        assert_fails(&cpu_run(&scratch("info-batch-bad"), &[&data_flags[..], extra].concat()), needle);
    };
    refused(&["--mode", "hybrid"], "--mode full");
    refused(&["--mode", "full", "--select-keep", "0.5"], "--select-keep");
    refused(&["--mode", "full", "--info-batch-anneal", "2"], "--info-batch-anneal");
    assert_fails(&cpu_run(&scratch("info-batch-shapes"), &["--info-batch", "0.5", "--mode", "full"]), "--data");
    assert_fails(&cpu_run(&scratch("info-batch"), &[&pruning[..], &["--resume"]].concat()), "does not resume");
}
