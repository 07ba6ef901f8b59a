//! GPT-2 (kael_host::gpt2): loading the Hugging Face layout, logits against
//! an independent numpy forward (tests/data/gpt2_reference.py), the KV
//! cache, sampling and the errors for a bad model directory.
//!
//! The tiny model is made here: random weights with a fixed seed (2 layers,
//! 2 heads, 32-dim embeddings, 64-token vocab, 16 positions), written with
//! the safetensors writer under Hugging Face names (Conv1D weights
//! `[in, out]`), so the loader sees what a real snapshot holds.
mod common;

use kael_core::{DType, Device, Rng, Tensor};
use kael_host::Error;
use kael_host::gpt2::{Decode, Gpt2, Gpt2Config, KvCache, LoadOptions, Sampler, generate};
use kael_host::safetensors_io::save;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

// ------------------------------------------------------------- helpers

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("kael-gpt2-{tag}-{}-{n}", std::process::id()));
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

fn tiny_config() -> Gpt2Config {
    Gpt2Config {
        n_embd: 32,
        n_head: 2,
        n_layer: 2,
        n_positions: 16,
        vocab_size: 64,
        ..Gpt2Config::gpt2_124m()
    }
}

/// Every tensor of the tiny model under its Hugging Face name: N(0, 0.3)
/// weights, N(0, 0.1) biases, norms 1 + N(0, 0.1) (all random, so that a
/// mixed-up name or a missing transpose shows in the logits).
fn tiny_tensors(cfg: &Gpt2Config, seed: u64) -> Vec<(String, Tensor)> {
    let dev = Device::cpu();
    let mut rng = Rng::new(seed);
    let mut n = |shape: &[usize], std: f64, mean: f64| {
        Tensor::randn(shape, DType::F32, &dev, &mut rng)
            .unwrap()
            .affine(std, mean)
            .unwrap()
    };
    let c = cfg.n_embd;
    let mut v = vec![
        ("wte.weight".to_string(), n(&[cfg.vocab_size, c], 0.3, 0.0)),
        ("wpe.weight".to_string(), n(&[cfg.n_positions, c], 0.3, 0.0)),
    ];
    for i in 0..cfg.n_layer {
        for ln in ["ln_1", "ln_2"] {
            v.push((format!("h.{i}.{ln}.weight"), n(&[c], 0.1, 1.0)));
            v.push((format!("h.{i}.{ln}.bias"), n(&[c], 0.1, 0.0)));
        }
        for (name, n_in, n_out) in [
            ("attn.c_attn", c, 3 * c),
            ("attn.c_proj", c, c),
            ("mlp.c_fc", c, 4 * c),
            ("mlp.c_proj", 4 * c, c),
        ] {
            v.push((format!("h.{i}.{name}.weight"), n(&[n_in, n_out], 0.3, 0.0)));
            v.push((format!("h.{i}.{name}.bias"), n(&[n_out], 0.1, 0.0)));
        }
    }
    v.push(("ln_f.weight".to_string(), n(&[c], 0.1, 1.0)));
    v.push(("ln_f.bias".to_string(), n(&[c], 0.1, 0.0)));
    v
}

/// Writes `model.safetensors` (names prefixed with `prefix`) and `config.json`.
fn write_model(dir: &Path, cfg: &Gpt2Config, tensors: &[(String, Tensor)], prefix: &str) {
    let named: Vec<(String, &Tensor)> = tensors
        .iter()
        .map(|(n, t)| (format!("{prefix}{n}"), t))
        .collect();
    save(dir.join("model.safetensors"), &named).unwrap();
    std::fs::write(dir.join("config.json"), cfg.to_json()).unwrap();
}

fn tiny_model_dir(tag: &str) -> TempDir {
    let dir = TempDir::new(tag);
    let cfg = tiny_config();
    write_model(&dir.0, &cfg, &tiny_tensors(&cfg, 42), "");
    dir
}

/// The numpy reference's logits, run with `$KAEL_PYTHON` (default
/// `python3`; `scripts/test.sh` points it at an interpreter with numpy).
/// When python or numpy is missing: a panic if `KAEL_REQUIRE_NUMPY` is set
/// (as `scripts/test.sh` does, so CI cannot pass without the check),
/// otherwise `None` after a `SKIPPED` line on stderr.
fn reference_logits(dir: &Path, ids: &[u32]) -> Option<Vec<f32>> {
    let lines = reference(dir, ids, &[])?;
    Some(lines[0].iter().map(|&v| v as f32).collect())
}

/// Every line the reference prints (logits, then hidden states with
/// `--hidden`), computed in f64 with `--f64`.
fn reference(dir: &Path, ids: &[u32], flags: &[&str]) -> Option<Vec<Vec<f64>>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gpt2_reference.py");
    let python = std::env::var("KAEL_PYTHON").unwrap_or_else(|_| "python3".into());
    let missing = |why: String| {
        if std::env::var_os("KAEL_REQUIRE_NUMPY").is_some_and(|v| v != "0") {
            panic!(
                "the numpy comparison cannot run: {why}; KAEL_REQUIRE_NUMPY is set, so this fails \
                 (install numpy, or point KAEL_PYTHON at a python that has it)"
            );
        }
        common::skip(&format!(
            "numpy comparison not run: {why} (bash scripts/test.sh installs numpy)"
        ));
        None
    };
    let out = match Command::new(&python)
        .arg(&script)
        .args(flags)
        .arg(dir)
        .args(ids.iter().map(u32::to_string))
        .output()
    {
        Ok(o) => o,
        Err(e) => return missing(format!("{python} could not be run ({e})")),
    };
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("No module named 'numpy'") {
            return missing(format!("numpy is not installed for {python}"));
        }
        panic!("gpt2_reference.py failed: {err}");
    }
    let text = String::from_utf8(out.stdout).unwrap();
    let parse = |line: &str| -> Vec<f64> {
        let body = line.trim().trim_start_matches('[').trim_end_matches(']');
        body.split(',').map(|s| s.trim().parse().unwrap()).collect()
    };
    Some(
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(parse)
            .collect(),
    )
}

fn err_text(r: kael_host::Result<Gpt2>) -> String {
    r.unwrap_err().to_string()
}

const IDS: [u32; 7] = [3, 17, 42, 5, 63, 0, 9];

// -------------------------------------------------------------- logits

#[test]
fn logits_match_the_numpy_reference() {
    let dir = tiny_model_dir("ref");
    let Some(want) = reference_logits(&dir.0, &IDS) else {
        return;
    };
    for (name, dev) in common::devices() {
        let model = Gpt2::load(&dir.0, &dev).unwrap();
        let logits = model.forward(&IDS).unwrap();
        assert_eq!(logits.shape(), &[IDS.len(), 64], "{name}");
        common::assert_close(&logits.to_vec::<f32>().unwrap(), &want, 1e-4);
    }
}

#[test]
fn f64_loading_matches_the_numpy_reference_in_f64() {
    let dir = tiny_model_dir("ref64");
    let Some(want) = reference(&dir.0, &IDS, &["--f64"]) else {
        return;
    };
    let opts = LoadOptions {
        dtype: DType::F64,
        trainable: false,
    };
    for (name, dev) in common::devices() {
        let model = Gpt2::load_with(&dir.0, &dev, opts).unwrap();
        assert_eq!(model.dtype(), DType::F64);
        let logits = model.forward(&IDS).unwrap();
        assert_eq!(logits.dtype(), DType::F64, "{name}");
        common::assert_close64(&logits.to_vec::<f64>().unwrap(), &want[0], 1e-10);
    }
}

#[test]
fn hidden_states_match_hugging_face_convention_against_numpy() {
    let dir = tiny_model_dir("hidden");
    let cfg = tiny_config();
    let Some(want) = reference(&dir.0, &IDS, &["--f64", "--hidden"]) else {
        return;
    };
    assert_eq!(
        want.len(),
        1 + cfg.n_layer + 1,
        "logits, then n_layer + 1 states"
    );
    let opts = LoadOptions {
        dtype: DType::F64,
        trainable: false,
    };
    for (_, dev) in common::devices() {
        let model = Gpt2::load_with(&dir.0, &dev, opts).unwrap();
        let (logits, hidden) = model.forward_with_hidden_states(&IDS).unwrap();
        common::assert_close64(&logits.to_vec::<f64>().unwrap(), &want[0], 1e-10);
        assert_eq!(hidden.len(), cfg.n_layer + 1);
        for (h, w) in hidden.iter().zip(&want[1..]) {
            assert_eq!(h.shape(), &[IDS.len(), cfg.n_embd]);
            common::assert_close64(&h.to_vec::<f64>().unwrap(), w, 1e-10);
        }
    }
    // f32 too
    let model = Gpt2::load(&dir.0, &Device::cpu()).unwrap();
    let (_, hidden) = model.forward_with_hidden_states(&IDS).unwrap();
    let last: Vec<f32> = want[want.len() - 1].iter().map(|&v| v as f32).collect();
    common::assert_close(&hidden[cfg.n_layer].to_vec::<f32>().unwrap(), &last, 1e-4);
}

#[test]
fn a_dtype_other_than_f32_or_f64_is_refused() {
    let dir = tiny_model_dir("dtype");
    let opts = LoadOptions {
        dtype: DType::I32,
        trainable: false,
    };
    let e = Gpt2::load_with(&dir.0, &Device::cpu(), opts)
        .unwrap_err()
        .to_string();
    assert!(e.contains("F32 or F64") && e.contains("load_with"), "{e}");
}

/// Cross-entropy of predicting `IDS[1..]` from `IDS[..n-1]`.
fn next_token_loss(model: &Gpt2) -> Tensor {
    let n = IDS.len();
    let logits = model.forward(&IDS[..n - 1]).unwrap();
    let targets: Vec<i64> = IDS[1..].iter().map(|&i| i64::from(i)).collect();
    let t = Tensor::from_slice(&targets, &[n - 1], &model.device()).unwrap();
    kael_core::nn::cross_entropy(&logits, &t, kael_core::nn::Reduction::Mean, None).unwrap()
}

#[test]
fn a_trainable_copy_has_exact_gradients_and_leaves_the_file_alone() {
    let dir = tiny_model_dir("train");
    let opts = LoadOptions {
        dtype: DType::F64,
        trainable: true,
    };
    let model = Gpt2::load_with(&dir.0, &Device::cpu(), opts).unwrap();
    let params = model.parameters();
    // wte, wpe, 12 per block, ln_f's 2
    assert_eq!(params.len(), 2 + 12 * tiny_config().n_layer + 2);
    assert!(params.iter().all(|p| p.requires_grad() && p.is_leaf()));
    next_token_loss(&model).backward().unwrap();
    assert!(params.iter().all(|p| p.grad().is_some()));
    // central differences on a few entries of three parameters
    let eps = 1e-6;
    for (pi, idx) in [(0usize, 3 * 32 + 5), (4, 7), (params.len() - 1, 2)] {
        let p = &params[pi];
        let analytic = p
            .grad()
            .unwrap()
            .reshape(&[-1])
            .unwrap()
            .to_vec::<f64>()
            .unwrap()[idx];
        let flat = p.detach().unwrap().reshape(&[-1]).unwrap();
        let at = |delta: f64| {
            kael_core::autograd::no_grad(|| {
                let x = flat.narrow(0, idx, 1)?;
                x.add_scalar_(delta)?;
                let l = next_token_loss(&model).item::<f64>()?;
                x.add_scalar_(-delta)?;
                Ok::<f64, kael_core::Error>(l)
            })
            .unwrap()
        };
        let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
        assert!(
            (numeric - analytic).abs() <= 1e-6 + 1e-5 * analytic.abs(),
            "param {pi}[{idx}]: analytic {analytic}, numeric {numeric}"
        );
    }
    // one SGD step lowers the loss; the file on disk is unchanged
    let before = next_token_loss(&model).item::<f64>().unwrap();
    kael_core::autograd::no_grad(|| {
        for p in &params {
            p.sub_(&p.grad().unwrap().mul_scalar(0.5)?)?;
        }
        Ok::<(), kael_core::Error>(())
    })
    .unwrap();
    let after = next_token_loss(&model).item::<f64>().unwrap();
    assert!(after < before, "{after} !< {before}");
    let cfg = tiny_config();
    let written = tiny_tensors(&cfg, 42);
    let original = written.iter().find(|(n, _)| n == "wte.weight").unwrap();
    let file = kael_host::safetensors_io::load(dir.path("model.safetensors")).unwrap();
    let on_disk = file.get("wte.weight").unwrap().to_vec::<f32>().unwrap();
    assert_eq!(on_disk, original.1.to_vec::<f32>().unwrap());
    let trained = params[0]
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_ne!(trained, on_disk);
}

#[test]
fn a_transformer_prefix_on_the_names_loads_the_same_model() {
    let dir = TempDir::new("prefix");
    let cfg = tiny_config();
    write_model(&dir.0, &cfg, &tiny_tensors(&cfg, 42), "transformer.");
    let Some(want) = reference_logits(&dir.0, &IDS[..3]) else {
        return;
    };
    let model = Gpt2::load(&dir.0, &Device::cpu()).unwrap();
    let got = model.forward(&IDS[..3]).unwrap().to_vec::<f32>().unwrap();
    common::assert_close(&got, &want, 1e-4);
}

#[test]
fn loaded_f32_weights_are_zero_copy_views_of_the_file() {
    let dir = tiny_model_dir("zerocopy");
    let file = kael_host::safetensors_io::load(dir.path("model.safetensors")).unwrap();
    let model = Gpt2::from_safetensors(tiny_config(), &file, &Device::cpu()).unwrap();
    let in_file = file.get("h.1.mlp.c_fc.weight").unwrap();
    let in_model = &model.blocks[1].mlp.c_fc.weight; // a transposed view
    assert_eq!(in_model.shape(), &[128, 32]);
    assert!(std::sync::Arc::ptr_eq(
        &in_file.storage(),
        &in_model.storage()
    ));
}

#[test]
fn logits_with_the_kv_cache_match_the_full_forward() {
    let dir = tiny_model_dir("cache");
    let model = Gpt2::load(&dir.0, &Device::cpu()).unwrap();
    let full = model.forward(&IDS).unwrap().to_vec::<f32>().unwrap();
    let mut cache = KvCache::new();
    let mut got = model
        .forward_with_cache(&IDS[..3], &mut cache)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    for &id in &IDS[3..] {
        got.extend(
            model
                .forward_with_cache(&[id], &mut cache)
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
        );
    }
    assert_eq!(cache.len(), IDS.len());
    common::assert_close(&got, &full, 1e-5);
}

#[test]
fn greedy_generation_with_and_without_the_kv_cache_agrees_token_for_token() {
    let dir = tiny_model_dir("greedy");
    for (name, dev) in common::devices() {
        let model = Gpt2::load(&dir.0, &dev).unwrap();
        let run = |decode| {
            let mut streamed = Vec::new();
            let ids = generate(
                &model,
                &IDS[..2],
                14,
                &mut Sampler::greedy(),
                decode,
                |id| {
                    streamed.push(id);
                    Ok(())
                },
            )
            .unwrap();
            assert_eq!(ids, streamed, "{name}: every token is streamed");
            ids
        };
        let cached = run(Decode::Cached);
        assert_eq!(cached.len(), 14);
        assert_eq!(cached, run(Decode::Uncached), "{name}");
    }
}

#[test]
fn greedy_generation_follows_the_reference_argmax() {
    let dir = tiny_model_dir("argmax");
    let model = Gpt2::load(&dir.0, &Device::cpu()).unwrap();
    let ids = generate(
        &model,
        &IDS[..4],
        3,
        &mut Sampler::greedy(),
        Decode::Cached,
        |_| Ok(()),
    )
    .unwrap();
    let mut seq = IDS[..4].to_vec();
    for &id in &ids {
        let Some(logits) = reference_logits(&dir.0, &seq) else {
            return;
        };
        let last = &logits[(seq.len() - 1) * 64..];
        let argmax = (0..64).fold(0, |b, i| if last[i] > last[b] { i } else { b });
        assert_eq!(id as usize, argmax);
        seq.push(id);
    }
}

// ------------------------------------------------------------ sampling

#[test]
fn greedy_sampling_picks_the_first_largest_logit() {
    let mut s = Sampler::greedy();
    assert_eq!(s.sample(&[0.5, 2.0, -1.0, 2.0]).unwrap(), 1);
    assert_eq!(s.sample(&[f32::NAN, -3.0, -4.0]).unwrap(), 1);
}

#[test]
fn sampling_with_the_same_seed_repeats_and_stays_within_top_k() {
    let logits: Vec<f32> = (0..20).map(|i| (i as f32 * 0.37).sin()).collect();
    let mut order: Vec<usize> = (0..20).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    let top3 = &order[..3];
    let draw = |seed| {
        let mut s = Sampler::new(1.5, 3, seed).unwrap();
        (0..200)
            .map(|_| s.sample(&logits).unwrap())
            .collect::<Vec<_>>()
    };
    let a = draw(7);
    assert_eq!(a, draw(7));
    assert!(a.iter().all(|&id| top3.contains(&(id as usize))));
    // all three candidates come up in 200 draws at temperature 1.5
    assert!(top3.iter().all(|&k| a.contains(&(k as u32))));
}

#[test]
fn top_k_one_is_greedy() {
    let logits = [0.1f32, 0.9, 0.3];
    let mut s = Sampler::new(5.0, 1, 3).unwrap();
    assert!((0..50).all(|_| s.sample(&logits).unwrap() == 1));
}

#[test]
fn a_negative_temperature_is_refused() {
    let e = Sampler::new(-0.5, 0, 0).unwrap_err();
    assert!(e.to_string().contains(">= 0"), "{e}");
}

// -------------------------------------------------------------- errors

#[test]
fn generation_past_the_context_is_refused_with_the_limit() {
    let dir = tiny_model_dir("ctx");
    let model = Gpt2::load(&dir.0, &Device::cpu()).unwrap();
    let e = generate(
        &model,
        &IDS,
        10,
        &mut Sampler::greedy(),
        Decode::Cached,
        |_| Ok(()),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("context of 16") && msg.contains("at most 9"),
        "{msg}"
    );
}

#[test]
fn a_token_outside_the_vocabulary_is_refused() {
    let dir = tiny_model_dir("vocab");
    let model = Gpt2::load(&dir.0, &Device::cpu()).unwrap();
    let msg = model.forward(&[1, 64]).unwrap_err().to_string();
    assert!(
        msg.contains("token id 64") && msg.contains("vocab_size 64"),
        "{msg}"
    );
}

#[test]
fn a_missing_model_dir_is_refused_naming_it() {
    let dir = TempDir::new("nodir");
    let msg = err_text(Gpt2::load(dir.path("absent"), &Device::cpu()));
    assert!(
        msg.contains("absent") && msg.contains("not a directory"),
        "{msg}"
    );
}

#[test]
fn a_model_dir_without_config_json_is_refused_naming_it() {
    let dir = tiny_model_dir("noconfig");
    std::fs::remove_file(dir.path("config.json")).unwrap();
    let msg = err_text(Gpt2::load(&dir.0, &Device::cpu()));
    assert!(msg.contains("has no config.json"), "{msg}");
}

#[test]
fn a_config_without_n_embd_is_refused_naming_the_field() {
    let dir = tiny_model_dir("badconfig");
    std::fs::write(
        dir.path("config.json"),
        r#"{"n_head": 2, "n_layer": 2, "n_positions": 16, "vocab_size": 64}"#,
    )
    .unwrap();
    let e = Gpt2::load(&dir.0, &Device::cpu()).unwrap_err();
    assert!(matches!(e, Error::Format { .. }));
    assert!(e.to_string().contains("no \"n_embd\""), "{e}");
}

#[test]
fn n_ctx_stands_in_for_n_positions() {
    let dir = TempDir::new("nctx");
    let f = dir.path("config.json");
    std::fs::write(
        &f,
        r#"{"n_embd": 8, "n_head": 2, "n_layer": 1, "n_ctx": 5, "vocab_size": 3}"#,
    )
    .unwrap();
    let cfg = Gpt2Config::from_file(&f).unwrap();
    assert_eq!(cfg.n_positions, 5);
    assert_eq!(cfg.layer_norm_epsilon, 1e-5);
}

#[test]
fn a_missing_tensor_is_refused_naming_it() {
    let dir = TempDir::new("missing");
    let cfg = tiny_config();
    let tensors: Vec<_> = tiny_tensors(&cfg, 1)
        .into_iter()
        .filter(|(n, _)| n != "h.1.attn.c_proj.bias")
        .collect();
    write_model(&dir.0, &cfg, &tensors, "");
    let msg = err_text(Gpt2::load(&dir.0, &Device::cpu()));
    assert!(msg.contains("no tensor 'h.1.attn.c_proj.bias'"), "{msg}");
}

#[test]
fn a_tensor_of_the_wrong_shape_is_refused_with_both_shapes() {
    let dir = TempDir::new("shape");
    let cfg = tiny_config();
    let mut tensors = tiny_tensors(&cfg, 1);
    // an [out, in] (nn.Linear-style) c_fc weight instead of Conv1D's [in, out]
    for (n, t) in &mut tensors {
        if n == "h.0.mlp.c_fc.weight" {
            *t = t.t().unwrap().contiguous().unwrap();
        }
    }
    write_model(&dir.0, &cfg, &tensors, "");
    let msg = err_text(Gpt2::load(&dir.0, &Device::cpu()));
    assert!(
        msg.contains("'h.0.mlp.c_fc.weight'")
            && msg.contains("[128, 32]")
            && msg.contains("[32, 128]"),
        "{msg}"
    );
}

#[test]
fn weights_for_another_config_are_refused() {
    let dir = tiny_model_dir("mismatch");
    let cfg = Gpt2Config {
        n_layer: 3,
        ..tiny_config()
    };
    std::fs::write(dir.path("config.json"), cfg.to_json()).unwrap();
    let msg = err_text(Gpt2::load(&dir.0, &Device::cpu()));
    assert!(msg.contains("no tensor 'h.2.ln_1.weight'"), "{msg}");
}
