//! The conv-net example and the soak example as a user runs them, on wgpu (llvmpipe in
//! CI): both modes end to end with their files and a resume, the soak's verdict, and bad
//! input refused with exit status 2.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

mod common;

use common::{example, output_text as text};

fn scratch(name: &str) -> PathBuf {
    common::scratch(&format!("cnn_example-{name}"))
}

/// A small run on wgpu (software adapters allowed), with `extra` arguments.
fn small_run(out: &Path, extra: &[&str]) -> Output {
    let mut command = example("cnn_shapes_hybrid");
    command.args(["--backend", "wgpu", "--allow-software"]);
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
    let full = small_run(&out, &["--mode", "full", "--steps", "6"]);
    assert!(full.status.success(), "{}", text(&full));
    assert_eq!(read(&out.join("metrics-full.jsonl")).lines().count(), 6);
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
    assert!(metrics.contains("\"predicted\":true"), "hybrid mode predicted no step:\n{metrics}");
    let plot = read(&out.join("cnn.svg"));
    assert!(plot.contains("hybrid validation") && plot.contains("full validation"), "both modes in the plot");

    let resumed = small_run(&out, &["--mode", "full", "--steps", "8", "--resume"]);
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert_eq!(read(&out.join("metrics-full.jsonl")).lines().count(), 8);
}

#[test]
fn bad_input_is_refused_and_overwrites_nothing() {
    let out = scratch("bad");
    assert_fails(&small_run(&out, &["--resolution", "4"]), "--resolution");
    assert_fails(&small_run(&out, &["--widths", "8,16,32,64", "--resolution", "8"]), "too small for 4 blocks");
    assert_fails(&small_run(&out, &["--widths", "8,0"]), "--widths");
    assert_fails(&small_run(&out, &["--lr", "0"]), "--lr");
    assert_fails(&small_run(&out, &["--resume"]), "no hybrid checkpoint");

    let first = small_run(&out, &["--mode", "full", "--steps", "3"]);
    assert!(first.status.success(), "{}", text(&first));
    let metrics = read(&out.join("metrics-full.jsonl"));
    assert_fails(&small_run(&out, &["--mode", "full", "--steps", "3"]), "already holds a full run");
    assert_eq!(read(&out.join("metrics-full.jsonl")), metrics, "a refused run must not touch the files");
}

#[test]
fn the_soak_prints_the_report_and_a_flat_verdict() {
    let mut command = example("vram_soak");
    command.args(["--backend", "wgpu", "--allow-software", "--model", "cnn", "--resolution", "16"]);
    command.args(["--batch", "4", "--steps", "60", "--settle", "20"]);
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("memory report") && stdout.contains("verdict over steps 20..60: flat"), "{}", text(&output));

    let mut command = example("vram_soak");
    command.args(["--backend", "cpu", "--steps", "10", "--settle", "10"]);
    let output = command.output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
}
