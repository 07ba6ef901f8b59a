//! `kael-train --sample --checkpoint PATH`: loads a checkpoint a training
//! run saved (weights, model shape and vocabulary in its metadata) and
//! generates text from it, without training.

use crate::data::Corpus;
use crate::model::{CharGpt, Config};
use kael_core::nn::Module;
use kael_core::{Device, Rng};
use kael_host::checkpoint;
use std::error::Error;
use std::path::Path;

/// The `format` metadata every kael-train checkpoint carries.
pub const FORMAT: &str = "kael-train char-gpt";

/// Generates `chars` characters after `prompt` from the checkpoint at
/// `path`, and prints them.
pub fn run(
    path: &Path,
    device: &Device,
    prompt: &str,
    chars: usize,
    seed: u64,
) -> Result<(), Box<dyn Error>> {
    let ck = checkpoint::load(path, device)?;
    let meta = |key: &str| {
        ck.metadata.get(key).ok_or_else(|| {
            format!(
                "{}: no \"{key}\" in the checkpoint's metadata; --sample reads checkpoints that kael-train saved (format \"{FORMAT}\")",
                path.display()
            )
        })
    };
    let format = meta("format")?;
    if format != FORMAT {
        return Err(format!(
            "{}: checkpoint format is \"{format}\", not \"{FORMAT}\"; pass a checkpoint that kael-train saved",
            path.display()
        )
        .into());
    }
    let vocab: Vec<char> = meta("vocab")?.chars().collect();
    let cfg = parse_config(meta("config")?, vocab.len())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let corpus = Corpus::from_vocab(vocab);
    let model = CharGpt::new(cfg, device, &mut Rng::new(seed))?;
    model.load_state_dict(&ck.tensors)?;
    if corpus.encode(prompt).is_empty() {
        return Err(format!(
            "--prompt {prompt:?} has no character of the checkpoint's vocabulary; use characters of the training text"
        )
        .into());
    }
    let text = crate::generate(
        &model,
        &corpus,
        prompt,
        chars,
        0.8,
        &mut Rng::new(seed),
        device,
    )?;
    println!(
        "checkpoint: {} ({} layers, dim {}, {} heads, context {})",
        path.display(),
        cfg.layers,
        cfg.dim,
        cfg.heads,
        cfg.context
    );
    println!("sample:\n----\n{prompt}{}\n----", text.trim_end());
    Ok(())
}

/// `layers=1 dim=48 heads=4 context=32` (the `config` metadata).
fn parse_config(s: &str, vocab: usize) -> Result<Config, String> {
    let field = |name: &str| -> Result<usize, String> {
        s.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .ok_or_else(|| format!("config {s:?} has no {name}="))?
            .parse()
            .map_err(|e| format!("config {s:?}: {name} is not a count ({e})"))
    };
    Ok(Config {
        vocab,
        layers: field("layers")?,
        dim: field("dim")?,
        heads: field("heads")?,
        context: field("context")?,
    })
}
