//! The command line as a user meets it: bad backend names, unavailable backends, a run.

use std::process::Command;

mod common;

use common::output_text as text;

/// The `memory_demo` example binary.
fn demo() -> Command {
    common::example("memory_demo")
}

#[test]
fn unknown_backend_flag_lists_valid_names_and_exits_2() {
    let output = demo().args(["--backend", "nosuch"]).output().unwrap();
    let all = text(&output);
    assert_eq!(output.status.code(), Some(2), "{all}");
    for name in ["auto", "cuda", "wgpu", "cpu"] {
        assert!(String::from_utf8_lossy(&output.stderr).contains(name), "{all}");
    }
}

#[test]
fn unknown_backend_in_the_environment_exits_2() {
    let output = demo().env("LEANBURN_BACKEND", "tpu").output().unwrap();
    let all = text(&output);
    assert_eq!(output.status.code(), Some(2), "{all}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("tpu"), "{all}");
}

#[test]
fn cuda_without_a_driver_is_a_clear_error_not_a_panic() {
    if !matches!(leanburn::device::probe_cuda(), leanburn::device::CudaStatus::Available { .. }) {
        let output = demo().args(["--backend", "cuda"]).output().unwrap();
        let all = text(&output);
        assert_eq!(output.status.code(), Some(1), "{all}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("CUDA backend was requested but is not available"), "{all}");
        assert!(!stderr.contains("panicked"), "{all}");
    }
}

#[test]
fn cpu_run_reports_host_memory_and_device_memory_as_not_available() {
    let output =
        demo().args(["--backend", "cpu", "--steps", "3", "--batch", "2", "--resolution", "8"]).output().unwrap();
    let all = text(&output);
    assert!(output.status.success(), "{all}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("backend cpu"), "{all}");
    assert!(stdout.contains("device memory: not available"), "{all}");
    assert!(stdout.contains("host memory (process resident): current"), "{all}");
}

#[test]
fn wgpu_run_prints_the_adapter_and_a_leak_verdict_per_phase() {
    // As on a headless server: without XDG_RUNTIME_DIR, Mesa's Vulkan drivers print
    // "error: XDG_RUNTIME_DIR is invalid or not set" twice unless the example sets it.
    let output = demo()
        .env_remove("XDG_RUNTIME_DIR")
        .args(["--backend", "wgpu", "--steps", "6", "--batch", "2", "--resolution", "16"])
        .output()
        .unwrap();
    let all = text(&output);
    assert!(output.status.success(), "{all}");
    assert!(!String::from_utf8_lossy(&output.stderr).contains("XDG_RUNTIME_DIR"), "start-up noise\n{all}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("backend wgpu, adapter"), "{all}");
    assert!(stdout.contains("GROWING"), "the autodiff-forward phase must show growth\n{all}");
    assert!(stdout.matches("flat").count() >= 2, "full and inner phases must be flat\n{all}");
}

#[test]
fn zero_steps_is_rejected() {
    let output = demo().args(["--backend", "cpu", "--steps", "0"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
}

#[test]
fn a_pool_layout_where_there_is_no_configurable_pool_exits_2() {
    let output = demo().args(["--backend", "cpu", "--memory-pool", "exclusive-pages"]).output().unwrap();
    let all = text(&output);
    assert_eq!(output.status.code(), Some(2), "{all}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("the cpu backend takes no pool layout"), "{all}");
}

/// Also on the other pool layout (`--memory-pool`), which the selection line names.
#[test]
fn lean_wgpu_run_keeps_the_inner_forward_flat() {
    let output = demo()
        .args(["--backend", "wgpu", "--lean", "--steps", "6", "--batch", "2", "--resolution", "16"])
        .args(["--memory-pool", "exclusive-pages"])
        .output()
        .unwrap();
    let all = text(&output);
    assert!(output.status.success(), "{all}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("memory pool exclusive-pages"), "{all}");
    assert!(stdout.contains("lean<"), "the report must name the Lean stack\n{all}");
    assert!(stdout.contains("GROWING"), "the autodiff-forward control must still grow\n{all}");
    assert!(stdout.matches("flat").count() >= 2, "{all}");
}

/// `--help` is read in a terminal: no rustdoc link syntax from the doc comments clap reads.
#[test]
fn help_has_no_rustdoc_link_syntax() {
    for name in ["gpt2_small_hybrid", "cnn_shapes_hybrid", "burn_train_hybrid", "vram_soak", "memory_demo"] {
        let output = common::example(name).arg("--help").output().unwrap();
        assert!(output.status.success(), "{name}: {}", text(&output));
        let help = String::from_utf8_lossy(&output.stdout);
        assert!(help.contains("--backend"), "{name}: {help}");
        let links: Vec<&str> = help.lines().filter(|line| line.contains("[`") || line.contains("`]")).collect();
        assert!(links.is_empty(), "{name}: rustdoc links in --help:\n{}", links.join("\n"));
    }
}
