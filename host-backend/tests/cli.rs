//! The `kael` binary, run as a user would: exit status, stdout and stderr.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a panic is a failing test

use kael_core::{DType, Device, Rng, Tensor};
use kael_host::gpt2::{Decode, Gpt2, Gpt2Config, Sampler, generate};
use kael_host::safetensors_io::save;
use kael_host::tokenizer::Gpt2Tokenizer;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("kael-cli-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn kael(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kael"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A small weights file: wte.weight F32 [4, 3], h.0.attn.bias U8 [5].
fn weights(dir: &TempDir, name: &str) -> PathBuf {
    let dev = Device::cpu();
    let wte = Tensor::zeros(&[4, 3], DType::F32, &dev).unwrap();
    let bias = Tensor::zeros(&[5], DType::U8, &dev).unwrap();
    let path = dir.path(name);
    save(&path, &[("wte.weight", &wte), ("h.0.attn.bias", &bias)]).unwrap();
    path
}

/// A model directory with both files.
fn model_dir(dir: &TempDir) -> PathBuf {
    weights(dir, "model.safetensors");
    std::fs::write(dir.path("config.json"), r#"{"n_layer": 2, "n_head": 2}"#).unwrap();
    dir.0.clone()
}

// ------------------------------------------------------------- inspect

#[test]
fn inspect_lists_every_tensor_with_dtype_shape_bytes_and_load_path() {
    let dir = TempDir::new("inspect");
    let f = weights(&dir, "w.safetensors");
    let o = kael(&["inspect", p(&f)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let row = |name: &str| {
        out.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row for {name} in\n{out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(row("wte.weight"), "wte.weight F32 [4, 3] 48 zero-copy");
    assert_eq!(row("h.0.attn.bias"), "h.0.attn.bias U8 [5] 5 zero-copy");
    assert!(out.contains("tensors: 2 (17 elements)"), "{out}");
    assert!(out.contains("2 zero-copy (53 bytes"), "{out}");
    assert!(out.contains("0 copied"), "{out}");
}

#[test]
fn inspect_tensor_explains_one_tensor() {
    let dir = TempDir::new("explain");
    let f = weights(&dir, "w.safetensors");
    let o = kael(&["inspect", p(&f), "--tensor", "wte.weight"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("tensor 'wte.weight':"), "{out}");
    assert!(out.contains("zero-copy view of the memory map"), "{out}");
    // kael_core::explain's lines
    assert!(
        out.contains("shape: [4, 3]") && out.contains("strides: [3, 1]"),
        "{out}"
    );
    assert!(out.contains("external"), "{out}");
}

#[test]
fn inspect_of_an_unknown_tensor_fails_naming_it() {
    let dir = TempDir::new("unknown");
    let f = weights(&dir, "w.safetensors");
    let o = kael(&["inspect", p(&f), "--tensor", "lm_head.weight"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("'lm_head.weight'"), "{}", stderr(&o));
}

#[test]
fn inspect_of_a_missing_file_fails_naming_it() {
    let dir = TempDir::new("missing");
    let f = dir.path("absent.safetensors");
    let o = kael(&["inspect", p(&f)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("absent.safetensors"), "{}", stderr(&o));
    assert!(stdout(&o).is_empty());
}

#[test]
fn inspect_of_a_malformed_file_fails_with_the_reason() {
    let dir = TempDir::new("malformed");
    let f = dir.path("bad.safetensors");
    let mut bytes = 12u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"not json!!!!");
    std::fs::write(&f, bytes).unwrap();
    let o = kael(&["inspect", p(&f)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not valid JSON"), "{}", stderr(&o));
}

#[test]
fn inspect_without_a_file_is_a_usage_error() {
    let o = kael(&["inspect"]);
    assert_eq!(o.status.code(), Some(2));
}

// ------------------------------------------------------------ generate

/// A tiny GPT-2 over the real 50,257-token vocabulary (random weights,
/// fixed seed), so that the tokenizer's ids fit.
fn tiny_gpt2(dir: &TempDir) -> PathBuf {
    let config = Gpt2Config {
        n_embd: 8,
        n_head: 2,
        n_layer: 1,
        n_positions: 32,
        vocab_size: 50257,
        ..Gpt2Config::gpt2_124m()
    };
    let model = Gpt2::random(config, &Device::cpu(), &mut Rng::new(5)).unwrap();
    let m = dir.path("tiny-gpt2");
    model.save(&m).unwrap();
    m
}

fn generate_args<'a>(m: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "generate",
        "--model",
        p(m),
        "--prompt",
        "Hello",
        "--max-tokens",
        "5",
    ];
    v.extend_from_slice(extra);
    v
}

#[test]
fn generate_streams_the_prompt_and_its_continuation_then_reports_tokens_per_second() {
    let dir = TempDir::new("gen");
    let m = tiny_gpt2(&dir);
    let o = kael(&generate_args(
        &m,
        &[
            "--temperature",
            "0.8",
            "--top-k",
            "40",
            "--seed",
            "7",
            "--device",
            "cpu",
        ],
    ));
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with("Hello") && out.len() > "Hello\n".len(),
        "{out:?}"
    );
    let err = stderr(&o);
    assert!(
        err.contains("5 tokens in") && err.contains("tokens/s"),
        "{err}"
    );
}

#[test]
fn generate_with_the_same_seed_gives_the_same_text() {
    let dir = TempDir::new("seed");
    let m = tiny_gpt2(&dir);
    let args = generate_args(&m, &["--seed", "3", "--temperature", "1.0"]);
    let a = kael(&args);
    assert!(a.status.success(), "{}", stderr(&a));
    assert_eq!(stdout(&a), stdout(&kael(&args)));
}

#[test]
fn generate_greedy_matches_the_library_greedy_decode() {
    let dir = TempDir::new("greedy");
    let m = tiny_gpt2(&dir);
    let o = kael(&generate_args(&m, &["--temperature", "0"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let model = Gpt2::load(&m, &Device::cpu()).unwrap();
    let tok = Gpt2Tokenizer::new().unwrap();
    let prompt = tok.encode("Hello").unwrap();
    let ids = generate(
        &model,
        &prompt,
        5,
        &mut Sampler::greedy(),
        Decode::Cached,
        |_| Ok(()),
    )
    .unwrap();
    let want = format!("Hello{}\n", tok.decode(&ids).unwrap());
    assert_eq!(stdout(&o), want);
}

#[test]
fn generate_past_the_context_fails_with_the_limit() {
    let dir = TempDir::new("ctx");
    let m = tiny_gpt2(&dir);
    let o = kael(&[
        "generate",
        "--model",
        p(&m),
        "--prompt",
        "Hello",
        "--max-tokens",
        "40",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("context of 32"), "{}", stderr(&o));
}

#[test]
fn generate_with_weights_that_do_not_match_the_config_names_the_tensor() {
    // model_dir's weights are not a GPT-2 (no wpe.weight, wte [4, 3])
    let dir = TempDir::new("notgpt2");
    let m = model_dir(&dir);
    std::fs::write(
        dir.path("config.json"),
        r#"{"n_embd": 3, "n_head": 1, "n_layer": 1, "n_positions": 8, "vocab_size": 4}"#,
    )
    .unwrap();
    let o = kael(&["generate", "--model", p(&m), "--prompt", "x"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no tensor 'wpe.weight'"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn generate_with_an_incomplete_config_names_the_field() {
    let dir = TempDir::new("partialcfg");
    let m = model_dir(&dir); // config.json has n_layer and n_head only
    let o = kael(&["generate", "--model", p(&m), "--prompt", "x"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no \"n_embd\""), "{}", stderr(&o));
}

#[cfg(not(feature = "cuda"))]
#[test]
fn generate_on_cuda_without_the_cuda_feature_says_how_to_build_it() {
    let dir = TempDir::new("cuda");
    let m = tiny_gpt2(&dir);
    let o = kael(&generate_args(&m, &["--device", "cuda"]));
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--features cuda"), "{}", stderr(&o));
}

#[test]
fn generate_with_a_missing_model_dir_fails_naming_it() {
    let dir = TempDir::new("nodir");
    let m = dir.path("no-such-model");
    let o = kael(&["generate", "--model", p(&m), "--prompt", "x"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("no-such-model") && err.contains("does not exist"),
        "{err}"
    );
}

#[test]
fn generate_with_a_file_as_model_dir_fails() {
    let dir = TempDir::new("file");
    let f = weights(&dir, "model.safetensors");
    let o = kael(&["generate", "--model", p(&f), "--prompt", "x"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("is not a directory"), "{}", stderr(&o));
}

#[test]
fn generate_without_model_safetensors_fails_naming_it() {
    let dir = TempDir::new("noweights");
    std::fs::write(dir.path("config.json"), "{}").unwrap();
    let o = kael(&["generate", "--model", p(&dir.0), "--prompt", "x"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("has no model.safetensors"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn generate_without_config_json_fails_naming_it() {
    let dir = TempDir::new("noconfig");
    weights(&dir, "model.safetensors");
    let o = kael(&["generate", "--model", p(&dir.0), "--prompt", "x"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("has no config.json"), "{}", stderr(&o));
}

#[test]
fn generate_with_malformed_config_json_fails() {
    let dir = TempDir::new("badconfig");
    weights(&dir, "model.safetensors");
    std::fs::write(dir.path("config.json"), "{ n_layer: 2 ").unwrap();
    let o = kael(&["generate", "--model", p(&dir.0), "--prompt", "x"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("config.json is not valid JSON"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn generate_with_config_json_that_is_not_an_object_fails() {
    let dir = TempDir::new("arrconfig");
    weights(&dir, "model.safetensors");
    std::fs::write(dir.path("config.json"), "[2]").unwrap();
    let o = kael(&["generate", "--model", p(&dir.0), "--prompt", "x"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("must be a JSON object"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn generate_with_malformed_weights_fails_with_the_reason() {
    let dir = TempDir::new("badweights");
    std::fs::write(dir.path("model.safetensors"), [1u8, 2, 3]).unwrap();
    std::fs::write(dir.path("config.json"), "{}").unwrap();
    let o = kael(&["generate", "--model", p(&dir.0), "--prompt", "x"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("3 bytes long"), "{}", stderr(&o));
}

#[test]
fn generate_rejects_a_negative_temperature() {
    let dir = TempDir::new("temp");
    let m = model_dir(&dir);
    let o = kael(&[
        "generate",
        "--model",
        p(&m),
        "--prompt",
        "x",
        "--temperature",
        "-1",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("finite number >= 0"), "{}", stderr(&o));
}

#[test]
fn generate_rejects_zero_max_tokens() {
    let dir = TempDir::new("zero");
    let m = model_dir(&dir);
    let o = kael(&[
        "generate",
        "--model",
        p(&m),
        "--prompt",
        "x",
        "--max-tokens",
        "0",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--max-tokens"), "{}", stderr(&o));
}

#[test]
fn generate_rejects_an_unknown_device() {
    let dir = TempDir::new("dev");
    let m = model_dir(&dir);
    let o = kael(&[
        "generate",
        "--model",
        p(&m),
        "--prompt",
        "x",
        "--device",
        "tpu",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("tpu") && err.contains("cpu") && err.contains("cuda"),
        "{err}"
    );
}

#[test]
fn generate_requires_a_prompt() {
    let dir = TempDir::new("noprompt");
    let m = model_dir(&dir);
    let o = kael(&["generate", "--model", p(&m)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--prompt"), "{}", stderr(&o));
}
