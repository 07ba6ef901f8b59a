//! GPT-2's hyper-parameters, read from a Hugging Face `config.json`.

use crate::{Error, Result};
use serde_json::{Map, Value};
use std::path::Path;

/// The activation between `mlp.c_fc` and `mlp.c_proj`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// The tanh approximation (`gelu_new`, GPT-2's own).
    GeluTanh,
    /// The exact (erf) GELU (`gelu`).
    Gelu,
}

/// The shape of a GPT-2 model (Hugging Face `GPT2Config` field names).
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt2Config {
    /// Embedding width `C`.
    pub n_embd: usize,
    /// Attention heads (divides `n_embd`).
    pub n_head: usize,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Longest sequence (rows of `wpe`); `n_positions` or `n_ctx` in the JSON.
    pub n_positions: usize,
    /// Vocabulary size (rows of `wte`).
    pub vocab_size: usize,
    /// LayerNorm epsilon (default `1e-5`).
    pub layer_norm_epsilon: f64,
    /// The MLP activation (`activation_function`, default `gelu_new`).
    pub activation: Activation,
}

impl Gpt2Config {
    /// The 124M-parameter GPT-2 ("gpt2"): 12 layers, 12 heads, 768 wide,
    /// 1024 positions, 50257 tokens.
    pub fn gpt2_124m() -> Self {
        Self {
            n_embd: 768,
            n_head: 12,
            n_layer: 12,
            n_positions: 1024,
            vocab_size: 50257,
            layer_norm_epsilon: 1e-5,
            activation: Activation::GeluTanh,
        }
    }

    /// Reads `config.json`.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read; [`Error::Format`] for
    /// invalid JSON or a missing or bad field (see [`Gpt2Config::from_json`]).
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            op: "read",
            path: path.to_path_buf(),
            source,
        })?;
        let value: Value = serde_json::from_str(&text).map_err(|e| Error::Format {
            path: path.to_path_buf(),
            reason: format!(
                "config.json is not valid JSON ({e}); restore it from the model's release"
            ),
        })?;
        let Value::Object(map) = value else {
            return Err(Error::Format {
                path: path.to_path_buf(),
                reason: "config.json must be a JSON object (e.g. {\"n_layer\": 12, ...}); \
                         restore it from the model's release"
                    .into(),
            });
        };
        Self::from_json(&map).map_err(|reason| Error::Format {
            path: path.to_path_buf(),
            reason,
        })
    }

    /// Reads the fields from a parsed `config.json`; `Err` holds the reason
    /// (which field, what is wrong, the fix).
    ///
    /// # Errors
    /// A missing or non-integer `n_embd`, `n_head`, `n_layer`, `vocab_size`
    /// or `n_positions`/`n_ctx`; zero sizes; `n_head` not dividing `n_embd`;
    /// an unknown `activation_function`.
    pub fn from_json(map: &Map<String, Value>) -> std::result::Result<Self, String> {
        const FIX: &str = "use the config.json of a Hugging Face GPT-2 snapshot";
        let int = |name: &str| -> std::result::Result<Option<usize>, String> {
            match map.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(v) => v
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|&n| n > 0)
                    .map(Some)
                    .ok_or_else(|| {
                        format!("config.json: \"{name}\" is {v}, not a positive integer; {FIX}")
                    }),
            }
        };
        let need = |name: &str| -> std::result::Result<usize, String> {
            int(name)?.ok_or_else(|| format!("config.json has no \"{name}\"; {FIX}"))
        };
        let n_embd = need("n_embd")?;
        let n_head = need("n_head")?;
        let n_layer = need("n_layer")?;
        let vocab_size = need("vocab_size")?;
        let n_positions = match int("n_positions")? {
            Some(n) => n,
            None => int("n_ctx")?.ok_or_else(|| {
                format!("config.json has neither \"n_positions\" nor \"n_ctx\"; {FIX}")
            })?,
        };
        if n_embd % n_head != 0 {
            return Err(format!(
                "config.json: n_head {n_head} does not divide n_embd {n_embd}; {FIX}"
            ));
        }
        let layer_norm_epsilon = match map.get("layer_norm_epsilon") {
            None | Some(Value::Null) => 1e-5,
            Some(v) => v
                .as_f64()
                .filter(|e| e.is_finite() && *e >= 0.0)
                .ok_or_else(|| {
                    format!("config.json: \"layer_norm_epsilon\" is {v}, not a number >= 0; {FIX}")
                })?,
        };
        let activation = match map.get("activation_function") {
            None | Some(Value::Null) => Activation::GeluTanh,
            Some(Value::String(s)) => match s.as_str() {
                "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Activation::GeluTanh,
                "gelu" => Activation::Gelu,
                other => {
                    return Err(format!(
                        "config.json: activation_function \"{other}\" is not supported \
                         (supported: gelu_new, gelu_pytorch_tanh, gelu_fast, gelu); {FIX}"
                    ));
                }
            },
            Some(v) => {
                return Err(format!(
                    "config.json: \"activation_function\" is {v}, not a string; {FIX}"
                ));
            }
        };
        Ok(Self {
            n_embd,
            n_head,
            n_layer,
            n_positions,
            vocab_size,
            layer_norm_epsilon,
            activation,
        })
    }

    /// The `config.json` text for this configuration (Hugging Face names).
    pub fn to_json(&self) -> String {
        let act = match self.activation {
            Activation::GeluTanh => "gelu_new",
            Activation::Gelu => "gelu",
        };
        let v = serde_json::json!({
            "model_type": "gpt2",
            "n_embd": self.n_embd,
            "n_head": self.n_head,
            "n_layer": self.n_layer,
            "n_positions": self.n_positions,
            "n_ctx": self.n_positions,
            "vocab_size": self.vocab_size,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "activation_function": act,
        });
        let mut s = v.to_string();
        s.push('\n');
        s
    }

    /// Parameters of the model (tied output embedding counted once).
    pub fn num_parameters(&self) -> usize {
        let c = self.n_embd;
        let block =
            2 * 2 * c + (c * 3 * c + 3 * c) + (c * c + c) + (c * 4 * c + 4 * c) + (4 * c * c + c);
        self.vocab_size * c + self.n_positions * c + self.n_layer * block + 2 * c
    }
}
