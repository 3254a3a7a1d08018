//! The burn-train example end to end: Burn's `SupervisedTraining` with leanburn's
//! `HybridStrategy` trains, predicts steps, writes burn-train's metric logs (leanburn's
//! telemetry among them) and both checkpoints, and resumes from them.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

mod common;

use common::output_text as text;

fn run(out: &Path, extra: &[&str]) -> Output {
    let mut command: Command = common::example("burn_train_hybrid");
    command.args(["--backend", "cpu", "--train-images", "256", "--valid-images", "64", "--batch", "16"]);
    command.args(["--resolution", "16", "--warmup", "4"]).arg("--out").arg(out).args(extra);
    command.output().unwrap()
}

/// `(steps, predicted)` from the summary line `...: N steps, P predicted (..%)`.
fn steps(output: &Output) -> (usize, usize) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().find(|line| line.contains(" predicted (")).unwrap_or_else(|| panic!("{}", text(output)));
    let numbers: Vec<usize> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|word| word.parse().ok()).collect();
    let at = numbers.len() - 3; // steps, predicted, percent
    (numbers[at], numbers[at + 1])
}

#[test]
fn trains_in_burn_train_with_predicted_steps_metrics_and_checkpoints_then_resumes() {
    let out = common::scratch("burn_train_example");
    let first = run(&out, &["--epochs", "2"]);
    assert!(first.status.success(), "{}", text(&first));
    let (taken, predicted) = steps(&first);
    assert_eq!(taken, 32, "two epochs of 16 batches:\n{}", text(&first));
    assert!(predicted > 0, "hybrid mode predicts steps:\n{}", text(&first));
    // burn-train's own metric logs, leanburn's telemetry among them.
    for metric in ["Loss", "Accuracy", "Memory_in_use", "Predicted_steps"] {
        assert!(out.join("train/epoch-2").join(format!("{metric}.log")).exists(), "{metric}:\n{}", text(&first));
    }
    let losses = fs::read_to_string(out.join("train/epoch-1/Loss.log")).unwrap();
    assert!(losses.lines().count() < 16, "no train metric for a predicted step:\n{losses}");
    assert!(out.join("checkpoint/model-2.mpk").exists() && out.join("hybrid-checkpoints/latest").exists());

    // Resume from epoch 2 to 3: the trainer continues from its own checkpoint (step 32).
    let resumed = run(&out, &["--epochs", "3", "--resume-epoch", "2"]);
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert_eq!(steps(&resumed).0, 16, "one more epoch:\n{}", text(&resumed));
    assert!(out.join("hybrid-checkpoints/ckpt-00000048").exists(), "{}", text(&resumed));

    // Control: all-full predicts nothing.
    let full_out = common::scratch("burn_train_example-full");
    let full = run(&full_out, &["--epochs", "1", "--mode", "full"]);
    assert!(full.status.success(), "{}", text(&full));
    assert_eq!(steps(&full), (16, 0));
    let _ = fs::remove_dir_all(out);
    let _ = fs::remove_dir_all(full_out);
}

/// `--data DIR`: an IDX pair (MNIST's format) is trained on in burn-train, one channel,
/// ten classes, `--valid-images` (64 of 120) held out; a broken file is refused before
/// anything runs.
#[test]
fn idx_images_train_in_burn_train_in_place_of_shapes() {
    let data = common::scratch("burn_train_example-idx-data");
    common::write_idx_pair(&data, 120);
    let out = common::scratch("burn_train_example-idx");
    let data_arg = data.to_str().unwrap();
    let trained = run(&out, &["--epochs", "1", "--data", data_arg]);
    assert!(trained.status.success(), "{}", text(&trained));
    let stdout = String::from_utf8_lossy(&trained.stdout);
    assert!(stdout.contains("conv net on the --data images"), "{}", text(&trained));
    // 56 images not held out: three batches of 16 and one of 8.
    assert_eq!(steps(&trained).0, 4, "one epoch over the 56 images not held out:\n{}", text(&trained));

    let images = fs::read(data.join("images-idx3-ubyte")).unwrap();
    fs::write(data.join("images-idx3-ubyte"), &images[..images.len() - 5]).unwrap();
    let broken = run(&common::scratch("burn_train_example-idx-broken"), &["--epochs", "1", "--data", data_arg]);
    assert_eq!(broken.status.code(), Some(2), "{}", text(&broken));
    assert!(String::from_utf8_lossy(&broken.stderr).contains("--data"), "{}", text(&broken));
    let _ = fs::remove_dir_all(out);
    let _ = fs::remove_dir_all(data);
}

#[test]
fn bad_input_is_refused_before_training() {
    let out = common::scratch("burn_train_example-bad");
    let output = run(&out, &["--lr=-1"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--lr"), "{}", text(&output));
    assert!(!out.join("checkpoint").exists());
}
