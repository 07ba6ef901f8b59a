//! The `kael-train` binary, run as a user would: where its checkpoint goes,
//! progress when stdout is not a terminal, and `--sample --checkpoint`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a panic is a failing test

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("kael-train-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A run small enough for a debug build (a second or two) whose loss still
/// falls by the 10% the binary insists on. Output is piped, so stderr is
/// not a terminal.
const TINY: [&str; 16] = [
    "--device",
    "cpu",
    "--steps",
    "30",
    "--layers",
    "1",
    "--dim",
    "16",
    "--heads",
    "2",
    "--context",
    "8",
    "--batch",
    "4",
    "--lr",
    "0.01",
];

fn train(extra: &[&str], target_dir: Option<&Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kael-train"));
    cmd.args(TINY).args(["--sample-chars", "5"]).args(extra);
    match target_dir {
        Some(d) => cmd.env("CARGO_TARGET_DIR", d),
        None => cmd.env_remove("CARGO_TARGET_DIR"),
    };
    cmd.output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "stdout:\n{}\nstderr:\n{}",
        stdout(o),
        stderr(o)
    );
}

#[test]
fn the_default_checkpoint_goes_under_cargo_target_dir() {
    let dir = TempDir::new("out");
    let o = train(&[], Some(&dir.0));
    ok(&o);
    let want = dir.0.join("kael-train").join("char-gpt.safetensors");
    assert!(
        want.is_file(),
        "no {}; stdout:\n{}",
        want.display(),
        stdout(&o)
    );
    assert!(
        stdout(&o).contains(&want.display().to_string()),
        "{}",
        stdout(&o)
    );
}

#[test]
fn an_explicit_out_path_is_used_as_given() {
    let dir = TempDir::new("explicit");
    let out = dir.0.join("mine.safetensors");
    let o = train(&["--out", out.to_str().unwrap()], None);
    ok(&o);
    assert!(out.is_file(), "stdout:\n{}", stdout(&o));
}

#[test]
fn progress_is_printed_as_lines_when_not_on_a_terminal() {
    let dir = TempDir::new("progress");
    let o = train(&["--log-every", "10"], Some(&dir.0));
    ok(&o);
    let out = stdout(&o);
    for step in [
        "step   10/30: loss ",
        "step   20/30: loss ",
        "step   30/30: loss ",
    ] {
        assert!(out.contains(step), "no {step:?} in:\n{out}");
    }
    let line = out.lines().find(|l| l.starts_with("step   10/30")).unwrap();
    assert!(line.contains(" tok/s") && line.contains("ETA "), "{line}");
}

#[test]
fn sample_generates_from_a_saved_checkpoint() {
    let dir = TempDir::new("sample");
    let ck = dir.0.join("ck.safetensors");
    ok(&train(&["--out", ck.to_str().unwrap()], None));
    let o = Command::new(env!("CARGO_BIN_EXE_kael-train"))
        .args(["--sample", "--checkpoint", ck.to_str().unwrap()])
        .args(["--prompt", "WAR", "--sample-chars", "40", "--device", "cpu"])
        .output()
        .unwrap();
    ok(&o);
    let out = stdout(&o);
    let body = out.split("----\n").nth(1).unwrap_or_default();
    assert!(body.starts_with("WAR"), "{out}");
    assert!(body.chars().count() >= 3 + 20, "too short a sample: {out}");
    assert!(
        !out.contains("validation loss"),
        "--sample must not train: {out}"
    );
}

#[test]
fn sample_without_a_checkpoint_says_which_flag_is_missing() {
    let o = Command::new(env!("CARGO_BIN_EXE_kael-train"))
        .arg("--sample")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--sample needs --checkpoint PATH"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn sample_with_a_missing_checkpoint_names_the_file() {
    let o = Command::new(env!("CARGO_BIN_EXE_kael-train"))
        .args(["--sample", "--checkpoint", "/nonexistent/ck.safetensors"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/nonexistent/ck.safetensors"),
        "{}",
        stderr(&o)
    );
}
