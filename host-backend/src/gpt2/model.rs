//! The GPT-2 network: embeddings, pre-norm blocks with a KV cache, tied
//! output head.

use super::config::{Activation, Gpt2Config};
use crate::safetensors_io::{self, SafeTensorsFile};
use crate::{Error, Result};
use kael_core::nn::{Dropout, Embedding, Gelu, GeluApproximation, LayerNorm, Linear, Mlp, Module};
use kael_core::{DType, Device, Rng, Tensor};
use std::path::{Path, PathBuf};

/// One pre-norm block: `x += attn(ln_1(x)); x += mlp(ln_2(x))`.
///
/// The attention is GPT-2's (`c_attn` → q, k, v; causal softmax; `c_proj`),
/// written here rather than through [`kael_core::nn::CausalSelfAttention`]
/// because generation needs the keys and values of earlier positions
/// ([`KvCache`]).
pub struct Gpt2Block {
    /// Norm before attention.
    pub ln_1: LayerNorm,
    /// `Linear(C, 3C)`: queries, keys, values.
    pub c_attn: Linear,
    /// `Linear(C, C)`: the attention's output projection.
    pub attn_c_proj: Linear,
    /// Norm before the MLP.
    pub ln_2: LayerNorm,
    /// `c_fc`, GELU, `c_proj`.
    pub mlp: Mlp,
}

/// Keys and values of the positions seen so far, per layer (`[H, S, hd]`
/// each), for incremental decoding.
#[derive(Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    len: usize,
}

impl KvCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many positions the cache holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the cache holds no position.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Forgets every position.
    pub fn clear(&mut self) {
        self.layers.clear();
        self.len = 0;
    }
}

/// GPT-2 (Hugging Face layout), batch size 1, inference.
///
/// `wte` doubles as the output head (`logits = ln_f(x) wteᵀ`). Weights
/// loaded from safetensors stay zero-copy views of the memory map when they
/// are f32 on the CPU; the `[in, out]` Conv1D weights become [`Linear`]s
/// through a free transpose view.
pub struct Gpt2 {
    config: Gpt2Config,
    /// Token embedding `[vocab_size, n_embd]` (also the output head).
    pub wte: Embedding,
    /// Position embedding `[n_positions, n_embd]`.
    pub wpe: Embedding,
    /// The blocks.
    pub blocks: Vec<Gpt2Block>,
    /// The final norm.
    pub ln_f: LayerNorm,
}

impl core::fmt::Debug for Gpt2 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Gpt2")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// How [`Gpt2::load_with`] builds the model.
///
/// ```
/// use kael_host::gpt2::LoadOptions;
/// use kael_core::DType;
/// let o = LoadOptions { dtype: DType::F64, trainable: true };
/// assert_eq!(LoadOptions::default().dtype, DType::F32);
/// # let _ = o;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// The weights' dtype: `F32` (the default) or `F64`; weights stored in
    /// another float dtype are converted.
    pub dtype: DType,
    /// Parameters that own their memory and require grad, for fine-tuning
    /// (see [`Gpt2::parameters`]); otherwise f32 weights on the CPU stay
    /// zero-copy views of the memory-mapped file.
    pub trainable: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            dtype: DType::F32,
            trainable: false,
        }
    }
}

/// Where weights come from, for error messages.
struct Source<'a> {
    path: PathBuf,
    get: &'a dyn Fn(&str) -> Option<Tensor>,
    prefix: &'static str,
    opts: LoadOptions,
}

impl Source<'_> {
    fn err(&self, reason: String) -> Error {
        Error::Format {
            path: self.path.clone(),
            reason,
        }
    }

    /// The tensor `name` (with the file's prefix), f32, of shape `shape`.
    fn take(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let full = format!("{}{name}", self.prefix);
        let t = (self.get)(&full).ok_or_else(|| {
            self.err(format!(
                "the GPT-2 weights have no tensor '{full}'; use the model.safetensors of a \
                 Hugging Face GPT-2 snapshot that matches config.json"
            ))
        })?;
        if t.shape() != shape {
            return Err(self.err(format!(
                "tensor '{full}' has shape {:?}, but config.json implies {shape:?}; \
                 use a config.json that matches the weights",
                t.shape()
            )));
        }
        let t = match t.dtype() {
            d if d == self.opts.dtype => t,
            DType::F32 | DType::F16 | DType::BF16 | DType::F64 => t.to_dtype(self.opts.dtype)?,
            d => {
                return Err(self.err(format!(
                    "tensor '{full}' has dtype {d:?}; GPT-2 weights must be floats \
                     (F32, F16, BF16 or F64)"
                )));
            }
        };
        self.param(t)
    }

    /// `t` as a parameter: a leaf that owns its memory and requires grad
    /// when trainable, `t` itself otherwise.
    fn param(&self, t: Tensor) -> Result<Tensor> {
        if !self.opts.trainable {
            return Ok(t);
        }
        Ok(t.contiguous()?.deep_clone()?.requires_grad_(true)?)
    }

    fn layer_norm(&self, name: &str, c: usize, eps: f64, dev: &Device) -> Result<LayerNorm> {
        let mut ln = LayerNorm::new(&[c], eps, true, dev)?;
        ln.weight = Some(self.take(&format!("{name}.weight"), &[c])?);
        ln.bias = Some(self.take(&format!("{name}.bias"), &[c])?);
        Ok(ln)
    }

    /// A Conv1D (`weight [in, out]`) as a [`Linear`] over the transposed
    /// view (a transposed copy that is itself the parameter, when trainable).
    fn conv1d(&self, name: &str, n_in: usize, n_out: usize) -> Result<Linear> {
        let w = self.take(&format!("{name}.weight"), &[n_in, n_out])?;
        let b = self.take(&format!("{name}.bias"), &[n_out])?;
        let w = if self.opts.trainable {
            kael_core::autograd::no_grad(|| w.t()?.contiguous())?.requires_grad_(true)?
        } else {
            w.t()?
        };
        Ok(Linear::from_weights(w, Some(b))?)
    }
}

fn gelu(a: Activation) -> Gelu {
    Gelu {
        approximate: match a {
            Activation::GeluTanh => GeluApproximation::Tanh,
            Activation::Gelu => GeluApproximation::None,
        },
    }
}

impl Gpt2 {
    /// Loads `dir/config.json` and `dir/model.safetensors` (memory-mapped)
    /// onto `device`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `dir` is not a directory or lacks a
    /// file; [`Error::Format`] for a bad config, a missing tensor, a wrong
    /// shape or dtype; the loader's errors for a malformed weights file.
    pub fn load(dir: impl AsRef<Path>, device: &Device) -> Result<Self> {
        Self::load_with(dir, device, LoadOptions::default())
    }

    /// [`Gpt2::load`] in the dtype `opts` asks for (F32 or F64), and as a
    /// trainable copy for fine-tuning when `opts.trainable`.
    ///
    /// # Errors
    /// As [`Gpt2::load`]; [`Error::InvalidArgument`] for a dtype other
    /// than F32 or F64.
    ///
    /// ```no_run
    /// use kael_host::gpt2::{Gpt2, LoadOptions};
    /// use kael_core::{DType, Device};
    /// let opts = LoadOptions { dtype: DType::F64, trainable: true };
    /// let model = Gpt2::load_with("gpt2", &Device::cpu(), opts)?;
    /// assert!(model.parameters().iter().all(|p| p.requires_grad()));
    /// # Ok::<(), kael_host::Error>(())
    /// ```
    pub fn load_with(dir: impl AsRef<Path>, device: &Device, opts: LoadOptions) -> Result<Self> {
        check_dtype("Gpt2::load_with", opts.dtype)?;
        let dir = dir.as_ref();
        const FIX: &str = "pass a directory holding model.safetensors and config.json \
                           (a Hugging Face GPT-2 snapshot)";
        if !dir.is_dir() {
            return Err(Error::InvalidArgument {
                op: "Gpt2::load",
                reason: format!("{} is not a directory; {FIX}", dir.display()),
            });
        }
        for f in ["config.json", "model.safetensors"] {
            if !dir.join(f).is_file() {
                return Err(Error::InvalidArgument {
                    op: "Gpt2::load",
                    reason: format!("{} has no {f}; {FIX}", dir.display()),
                });
            }
        }
        let config = Gpt2Config::from_file(&dir.join("config.json"))?;
        let file = safetensors_io::load_on(dir.join("model.safetensors"), device)?;
        let get = |name: &str| file.get(name).cloned();
        Self::from_fn_with(config, file.path(), &get, device, opts)
    }

    /// Builds the model from a loaded file (names with or without the
    /// `transformer.` prefix; extra tensors such as `h.N.attn.bias` or
    /// `lm_head.weight` are ignored).
    ///
    /// # Errors
    /// [`Error::Format`] for a missing tensor, a wrong shape or dtype.
    pub fn from_safetensors(
        config: Gpt2Config,
        file: &SafeTensorsFile,
        device: &Device,
    ) -> Result<Self> {
        let get = |name: &str| file.get(name).cloned();
        Self::from_fn(config, file.path(), &get, device)
    }

    /// Builds the model from named tensors in the Hugging Face layout;
    /// `origin` names their source in errors.
    ///
    /// # Errors
    /// [`Error::Format`] for a missing tensor, a wrong shape or dtype.
    pub fn from_fn(
        config: Gpt2Config,
        origin: &Path,
        get: &dyn Fn(&str) -> Option<Tensor>,
        device: &Device,
    ) -> Result<Self> {
        Self::from_fn_with(config, origin, get, device, LoadOptions::default())
    }

    /// [`Gpt2::from_fn`] with [`LoadOptions`].
    ///
    /// # Errors
    /// As [`Gpt2::from_fn`]; a dtype other than F32 or F64.
    pub fn from_fn_with(
        config: Gpt2Config,
        origin: &Path,
        get: &dyn Fn(&str) -> Option<Tensor>,
        device: &Device,
        opts: LoadOptions,
    ) -> Result<Self> {
        check_dtype("Gpt2::from_fn_with", opts.dtype)?;
        let prefix = if get("wte.weight").is_none() && get("transformer.wte.weight").is_some() {
            "transformer."
        } else {
            ""
        };
        let src = Source {
            path: origin.to_path_buf(),
            get,
            prefix,
            opts,
        };
        let (c, eps) = (config.n_embd, config.layer_norm_epsilon);
        let wte = Embedding::from_weights(src.take("wte.weight", &[config.vocab_size, c])?)?;
        let wpe = Embedding::from_weights(src.take("wpe.weight", &[config.n_positions, c])?)?;
        let mut rng = Rng::new(0); // only seeds the (disabled) dropout
        let mut blocks = Vec::with_capacity(config.n_layer);
        for i in 0..config.n_layer {
            let p = format!("h.{i}");
            let dropout = Dropout::new(0.0, &mut rng)?;
            dropout.eval();
            blocks.push(Gpt2Block {
                ln_1: src.layer_norm(&format!("{p}.ln_1"), c, eps, device)?,
                c_attn: src.conv1d(&format!("{p}.attn.c_attn"), c, 3 * c)?,
                attn_c_proj: src.conv1d(&format!("{p}.attn.c_proj"), c, c)?,
                ln_2: src.layer_norm(&format!("{p}.ln_2"), c, eps, device)?,
                mlp: Mlp {
                    c_fc: src.conv1d(&format!("{p}.mlp.c_fc"), c, 4 * c)?,
                    c_proj: src.conv1d(&format!("{p}.mlp.c_proj"), 4 * c, c)?,
                    act: gelu(config.activation),
                    dropout,
                },
            });
        }
        let ln_f = src.layer_norm("ln_f", c, eps, device)?;
        let model = Self {
            config,
            wte,
            wpe,
            blocks,
            ln_f,
        };
        if let Some(t) = model
            .named_tensors()
            .iter()
            .find(|(_, t)| !t.device().same_as(device))
        {
            return Err(src.err(format!(
                "tensor '{}' is on {:?}, not on the requested device; load the file with \
                 safetensors_io::load_on(path, device)",
                t.0,
                t.1.device()
            )));
        }
        Ok(model)
    }

    /// A model with GPT-2's initialisation (`N(0, 0.02)` weights, zero
    /// biases, unit norms), for tests and benchmarks.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `n_head` does not divide `n_embd`;
    /// [`kael_core::Error::OutOfMemory`].
    pub fn random(config: Gpt2Config, device: &Device, rng: &mut Rng) -> Result<Self> {
        if config.n_head == 0 || config.n_embd % config.n_head != 0 {
            return Err(Error::InvalidArgument {
                op: "Gpt2::random",
                reason: format!(
                    "n_head {} must be positive and divide n_embd {}",
                    config.n_head, config.n_embd
                ),
            });
        }
        let c = config.n_embd;
        let mut normal = |shape: &[usize]| -> Result<Tensor> {
            Ok(Tensor::randn(shape, DType::F32, device, rng)?.mul_scalar(0.02)?)
        };
        let mut named: Vec<(String, Tensor)> = vec![
            ("wte.weight".into(), normal(&[config.vocab_size, c])?),
            ("wpe.weight".into(), normal(&[config.n_positions, c])?),
        ];
        for i in 0..config.n_layer {
            for (name, n_in, n_out) in [
                ("attn.c_attn", c, 3 * c),
                ("attn.c_proj", c, c),
                ("mlp.c_fc", c, 4 * c),
                ("mlp.c_proj", 4 * c, c),
            ] {
                named.push((format!("h.{i}.{name}.weight"), normal(&[n_in, n_out])?));
                named.push((
                    format!("h.{i}.{name}.bias"),
                    Tensor::zeros(&[n_out], DType::F32, device)?,
                ));
            }
        }
        let mut norms = vec!["ln_f".to_string()];
        for i in 0..config.n_layer {
            norms.push(format!("h.{i}.ln_1"));
            norms.push(format!("h.{i}.ln_2"));
        }
        for n in norms {
            named.push((
                format!("{n}.weight"),
                Tensor::ones(&[c], DType::F32, device)?,
            ));
            named.push((
                format!("{n}.bias"),
                Tensor::zeros(&[c], DType::F32, device)?,
            ));
        }
        let get = |name: &str| {
            named
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, t)| t.clone())
        };
        Self::from_fn(config, Path::new("<random GPT-2>"), &get, device)
    }

    /// The configuration.
    pub fn config(&self) -> &Gpt2Config {
        &self.config
    }

    /// Every weight under its Hugging Face name and layout (Conv1D weights
    /// `[in, out]`), as [`safetensors_io::save`] wants them.
    pub fn named_tensors(&self) -> Vec<(String, Tensor)> {
        let mut v = Vec::new();
        let mut push = |name: String, t: Option<&Tensor>| {
            if let Some(t) = t {
                v.push((name, t.clone()));
            }
        };
        push("wte.weight".into(), Some(&self.wte.weight));
        push("wpe.weight".into(), Some(&self.wpe.weight));
        let conv = |l: &Linear| l.weight.t().ok();
        for (i, b) in self.blocks.iter().enumerate() {
            let p = format!("h.{i}");
            push(format!("{p}.ln_1.weight"), b.ln_1.weight.as_ref());
            push(format!("{p}.ln_1.bias"), b.ln_1.bias.as_ref());
            for (name, l) in [
                ("attn.c_attn", &b.c_attn),
                ("attn.c_proj", &b.attn_c_proj),
                ("mlp.c_fc", &b.mlp.c_fc),
                ("mlp.c_proj", &b.mlp.c_proj),
            ] {
                push(format!("{p}.{name}.weight"), conv(l).as_ref());
                push(format!("{p}.{name}.bias"), l.bias.as_ref());
            }
            push(format!("{p}.ln_2.weight"), b.ln_2.weight.as_ref());
            push(format!("{p}.ln_2.bias"), b.ln_2.bias.as_ref());
        }
        push("ln_f.weight".into(), self.ln_f.weight.as_ref());
        push("ln_f.bias".into(), self.ln_f.bias.as_ref());
        v
    }

    /// Writes `dir/model.safetensors` and `dir/config.json` (creating `dir`).
    ///
    /// # Errors
    /// [`Error::Io`] when the directory or a file cannot be written.
    pub fn save(&self, dir: impl AsRef<Path>) -> Result<()> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|source| Error::Io {
            op: "create",
            path: dir.to_path_buf(),
            source,
        })?;
        let named = self.named_tensors();
        let refs: Vec<(&str, &Tensor)> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
        safetensors_io::save(dir.join("model.safetensors"), &refs)?;
        let config = dir.join("config.json");
        std::fs::write(&config, self.config.to_json()).map_err(|source| Error::Io {
            op: "write",
            path: config,
            source,
        })
    }

    /// The device of the weights.
    pub fn device(&self) -> Device {
        self.wte.weight.device()
    }

    /// The dtype of the weights.
    pub fn dtype(&self) -> DType {
        self.wte.weight.dtype()
    }

    /// Every parameter once (the tied `wte` included once), in
    /// [`Gpt2::named_tensors`] order, for an optimizer; they require grad
    /// when the model was loaded trainable.
    pub fn parameters(&self) -> Vec<Tensor> {
        let mut v: Vec<Tensor> = vec![self.wte.weight.clone(), self.wpe.weight.clone()];
        for b in &self.blocks {
            for ln in [&b.ln_1, &b.ln_2] {
                v.extend(ln.weight.iter().cloned());
                v.extend(ln.bias.iter().cloned());
            }
            for l in [&b.c_attn, &b.attn_c_proj, &b.mlp.c_fc, &b.mlp.c_proj] {
                v.push(l.weight.clone());
                v.extend(l.bias.iter().cloned());
            }
        }
        v.extend(self.ln_f.weight.iter().cloned());
        v.extend(self.ln_f.bias.iter().cloned());
        v
    }

    /// Logits `[T, vocab_size]` and the hidden states, as Hugging Face's
    /// `output_hidden_states=True` gives them: `n_layer + 1` tensors
    /// `[T, n_embd]`, the embeddings, the input of each block after the
    /// first, and the output of the final norm `ln_f`.
    ///
    /// # Errors
    /// As [`Gpt2::forward`].
    pub fn forward_with_hidden_states(&self, ids: &[u32]) -> Result<(Tensor, Vec<Tensor>)> {
        let mut hidden = Vec::with_capacity(self.blocks.len() + 1);
        let logits = self.run(ids, &mut KvCache::new(), false, Some(&mut hidden))?;
        Ok((logits, hidden))
    }

    /// Logits `[T, vocab_size]` for every position of `ids` (no cache).
    ///
    /// # Errors
    /// As [`Gpt2::forward_with_cache`].
    pub fn forward(&self, ids: &[u32]) -> Result<Tensor> {
        self.forward_with_cache(ids, &mut KvCache::new())
    }

    /// Logits `[T, vocab_size]` for `ids`, the positions after those already
    /// in `cache`; appends their keys and values to `cache`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no ids, an id `>= vocab_size`, or more
    /// positions than `n_positions`; tensor errors.
    pub fn forward_with_cache(&self, ids: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        self.run(ids, cache, false, None)
    }

    /// Like [`Gpt2::forward_with_cache`], but the logits `[vocab_size]` of
    /// the last position only (what generation needs; skips the output
    /// head's work for the others).
    ///
    /// # Errors
    /// As [`Gpt2::forward_with_cache`].
    pub fn next_logits(&self, ids: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        Ok(self.run(ids, cache, true, None)?.select(0, 0)?)
    }

    fn run(
        &self,
        ids: &[u32],
        cache: &mut KvCache,
        last_only: bool,
        mut hidden: Option<&mut Vec<Tensor>>,
    ) -> Result<Tensor> {
        const OP: &str = "Gpt2::forward";
        let cfg = &self.config;
        let (t, past) = (ids.len(), cache.len);
        if t == 0 {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "no token ids; pass at least one".into(),
            });
        }
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= cfg.vocab_size) {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: format!(
                    "token id {bad} is outside the vocabulary (vocab_size {}); \
                     use the model's tokenizer",
                    cfg.vocab_size
                ),
            });
        }
        if past + t > cfg.n_positions {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: format!(
                    "{} positions ({past} cached + {t} new) exceed the model's context of {} \
                     (n_positions); use a shorter prompt or fewer new tokens",
                    past + t,
                    cfg.n_positions
                ),
            });
        }
        if !cache.layers.is_empty() && cache.layers.len() != self.blocks.len() {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: "the KV cache belongs to a model with another number of layers; \
                         use a fresh KvCache for each model"
                    .into(),
            });
        }
        let dev = self.device();
        let (c, h) = (cfg.n_embd, cfg.n_head);
        let hd = c / h;
        let id_vec: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
        let id_t = Tensor::from_slice(&id_vec, &[t], &dev)?;
        let tok = Tensor::embedding(&self.wte.weight, &id_t)?;
        let pos = self.wpe.weight.narrow(0, past, t)?;
        let mut x = tok.add(&pos)?; // [T, C]
        let s = past + t;
        let mask = if t > 1 {
            // key j is open to query i (absolute position past + i) when j <= past + i
            let q = Tensor::arange(past as i64, s as i64, &dev)?.unsqueeze(1)?;
            let k = Tensor::arange(0i64, s as i64, &dev)?.unsqueeze(0)?;
            let zero = Tensor::full(&[], 0.0, self.dtype(), &dev)?;
            let neg = Tensor::full(&[], f64::NEG_INFINITY, self.dtype(), &dev)?;
            Some(k.le(&q)?.where_cond(&zero, &neg)?)
        } else {
            None // one new query sees every cached key
        };
        if cache.layers.is_empty() {
            cache.layers.resize_with(self.blocks.len(), || None);
        }
        let scale = 1.0 / (hd as f64).sqrt();
        let mut new_kv = Vec::with_capacity(self.blocks.len());
        for (block, slot) in self.blocks.iter().zip(&cache.layers) {
            if let Some(h) = hidden.as_deref_mut() {
                h.push(x.clone());
            }
            let a = block.ln_1.forward(&x)?;
            // [T, 3C] -> [T, 3, H, hd] -> [3, H, T, hd]
            let qkv = block
                .c_attn
                .forward(&a)?
                .reshape(&[t, 3, h, hd])?
                .permute(&[1, 2, 0, 3])?;
            let q = qkv.select(0, 0)?.mul_scalar(scale)?;
            let (mut k, mut v) = (qkv.select(0, 1)?, qkv.select(0, 2)?);
            if let Some((pk, pv)) = slot {
                k = Tensor::cat(&[pk, &k], 1)?;
                v = Tensor::cat(&[pv, &v], 1)?;
            } else {
                k = k.contiguous()?;
                v = v.contiguous()?;
            }
            let mut scores = q.matmul(&k.transpose(-2, -1)?)?; // [H, T, S]
            if let Some(m) = &mask {
                scores = scores.add(m)?;
            }
            let att = scores.softmax(-1)?;
            let y = att.matmul(&v)?.transpose(0, 1)?.reshape(&[t, c])?; // [T, C]
            x = x.add(&block.attn_c_proj.forward(&y)?)?;
            x = x.add(&block.mlp.forward(&block.ln_2.forward(&x)?)?)?;
            new_kv.push((k, v));
        }
        // Commit the cache only once every layer succeeded.
        for (slot, kv) in cache.layers.iter_mut().zip(new_kv) {
            *slot = Some(kv);
        }
        cache.len = s;
        if last_only {
            x = x.narrow(0, t - 1, 1)?;
        }
        let x = self.ln_f.forward(&x)?;
        if let Some(h) = hidden {
            h.push(x.clone());
        }
        Ok(x.mm(&self.wte.weight.t()?)?)
    }
}

fn check_dtype(op: &'static str, dtype: DType) -> Result<()> {
    if matches!(dtype, DType::F32 | DType::F64) {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        op,
        reason: format!("GPT-2 loads in F32 or F64, not {dtype:?}; pass one of those"),
    })
}
