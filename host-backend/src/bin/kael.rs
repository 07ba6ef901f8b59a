//! `kael`: kael's command-line tool.
//!
//! ```text
//! kael inspect FILE.safetensors
//! kael generate --model DIR --prompt TEXT [--max-tokens N] [--temperature T]
//!               [--top-k K] [--seed S] [--device cpu|threaded|cuda]
//! ```
//!
//! `inspect` lists a file's tensors (name, dtype, shape, bytes) and how
//! they load (zero-copy views of the memory map, or copies).
//!
//! `generate` checks the model directory (`model.safetensors` and
//! `config.json`, both well-formed, in the Hugging Face GPT-2 layout),
//! loads the model (memory-mapped, zero-copy on the CPU), and continues the
//! prompt, streaming the text to stdout as each token is chosen; the speed
//! (tokens/s) goes to stderr at the end, so stdout holds only the text.
//! `--device cuda` needs a build with the `cuda` feature.
//!
//! Exit status: 0 on success, 1 on an error, 2 on a usage error.

use clap::{Args, Parser, Subcommand, ValueEnum};
use kael_core::Device;
use kael_host::gpt2::{Decode, Gpt2, Gpt2Config, Sampler};
use kael_host::safetensors_io::{self, SafeTensorsFile};
use kael_host::tokenizer::Gpt2Tokenizer;
use kael_host::{Error, Result};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "kael",
    version,
    about = "kael's command-line tool: inspect safetensors files, generate text with GPT-2"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List the tensors of a safetensors file (name, dtype, shape, bytes)
    /// and how they load (zero-copy or copied).
    Inspect {
        /// The .safetensors file.
        file: PathBuf,
        /// Also explain one tensor in full (strides, offset, storage, ...).
        #[arg(long, value_name = "NAME")]
        tensor: Option<String>,
    },
    /// Generate text with a GPT-2 model (Hugging Face layout), streaming
    /// it to stdout; tokens/s go to stderr.
    Generate(GenerateArgs),
}

/// Arguments of `kael generate`.
#[derive(Args, Debug)]
struct GenerateArgs {
    /// Model directory with model.safetensors and config.json (Hugging Face
    /// GPT-2 layout).
    #[arg(long, value_name = "DIR")]
    model: PathBuf,
    /// The text to continue.
    #[arg(long, value_name = "TEXT")]
    prompt: String,
    /// How many tokens to generate (at least 1).
    #[arg(long, value_name = "N", default_value_t = 50,
          value_parser = clap::value_parser!(u32).range(1..))]
    max_tokens: u32,
    /// Sampling temperature; 0 means greedy (always the most likely token).
    #[arg(long, value_name = "T", default_value_t = 1.0, value_parser = parse_temperature,
          allow_negative_numbers = true)]
    temperature: f32,
    /// Sample only among the K most likely tokens; 0 means no limit.
    #[arg(long, value_name = "K", default_value_t = 50)]
    top_k: usize,
    /// Seed of the sampler (the same seed gives the same text).
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
    /// Device to run on.
    #[arg(long, value_enum, default_value_t = DeviceArg::Cpu)]
    device: DeviceArg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DeviceArg {
    /// The CPU (the reference backend).
    Cpu,
    /// The threaded CPU backend (one thread per core).
    Threaded,
    /// The first CUDA GPU.
    Cuda,
}

fn parse_temperature(s: &str) -> std::result::Result<f32, String> {
    let t: f32 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a number; pass e.g. 0.8 (0 for greedy decoding)"))?;
    if t.is_finite() && t >= 0.0 {
        Ok(t)
    } else {
        Err(format!(
            "{s} is not a usable temperature; pass a finite number >= 0 (0 for greedy decoding)"
        ))
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Inspect { file, tensor } => inspect(file, tensor.as_deref()),
        Command::Generate(args) => device(args.device)
            .and_then(|dev| validate_model_dir(&args.model, &dev).map(|m| (m, dev)))
            .and_then(|(model, dev)| generate(args, model, &dev)),
    };
    match result {
        Ok(text) => {
            // A closed pipe (`kael inspect f | head`) is not an error.
            // every piece is escaped where it is formatted; this is the gate
            let text = terminal_safe_text(&text);
            let _ = std::io::stdout().lock().write_all(text.as_bytes());
            ExitCode::SUCCESS
        }
        Err(e) => {
            // an error can quote a file's or an argument's text
            eprintln!("error: {}", terminal_safe(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}

// ------------------------------------------------------------- inspect

/// The report of `kael inspect`, with `explain` for `tensor` if given.
fn inspect(path: &Path, tensor: Option<&str>) -> Result<String> {
    let file = safetensors_io::load(path)?;
    let mut s = report(&file);
    if let Some(name) = tensor {
        let t = file.tensor(name)?;
        let (begin, end) = file.entry(name).map_or((0, 0), |e| e.data_offsets());
        let start = safetensors_io::LEN_FIELD + file.header_len();
        let _ = writeln!(s, "\ntensor '{}':", terminal_safe(name));
        let _ = writeln!(
            s,
            "file bytes: {}..{} ({})",
            start + begin,
            start + end,
            if file.entry(name).is_some_and(|e| e.is_zero_copy()) {
                "zero-copy view of the memory map"
            } else {
                "copied"
            }
        );
        let _ = writeln!(s, "{}", kael_core::explain(&t));
    }
    Ok(s)
}

fn report(file: &SafeTensorsFile) -> String {
    let mut s = String::new();
    let stats = file.stats();
    let data = file.file_len() - safetensors_io::LEN_FIELD - file.header_len();
    let elements: usize = file.tensors().iter().map(|t| t.tensor().numel()).sum();
    let _ = writeln!(
        s,
        "file: {}",
        terminal_safe(&file.path().display().to_string())
    );
    let _ = writeln!(
        s,
        "size: {} bytes (8-byte length, {}-byte JSON header, {} bytes of tensor data)",
        file.file_len(),
        file.header_len(),
        data
    );
    let _ = writeln!(s, "tensors: {} ({elements} elements)", file.len());
    let _ = writeln!(
        s,
        "loading: {} zero-copy ({} bytes, views of the memory map), {} copied ({} bytes)",
        stats.zero_copy, stats.zero_copy_bytes, stats.copied, stats.copied_bytes
    );
    if !file.metadata().is_empty() {
        let _ = writeln!(s, "metadata:");
        for (k, v) in file.metadata() {
            let _ = writeln!(s, "  {}: {}", terminal_safe(k), terminal_safe(v));
        }
    }
    if file.is_empty() {
        return s;
    }
    let rows: Vec<[String; 5]> = file
        .tensors()
        .iter()
        .map(|t| {
            [
                terminal_safe(t.name()),
                dtype_name(t.tensor().dtype()).to_string(),
                format!("{:?}", t.tensor().shape()),
                t.nbytes().to_string(),
                if t.is_zero_copy() {
                    "zero-copy"
                } else {
                    "copied"
                }
                .to_string(),
            ]
        })
        .collect();
    let header = ["NAME", "DTYPE", "SHAPE", "BYTES", "LOAD"];
    let mut width = header.map(str::len);
    for row in &rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: [&str; 5]| {
        let [name, dtype, shape, bytes, load] = cells;
        let [wn, wd, ws, wb, _] = width;
        let _ = writeln!(
            s,
            "{name:<wn$}  {dtype:<wd$}  {shape:<ws$}  {bytes:>wb$}  {load}"
        );
    };
    line(header);
    for row in &rows {
        line([&row[0], &row[1], &row[2], &row[3], &row[4]]);
    }
    s
}

/// `text` with every control character (ESC and the rest of C0/C1, which
/// a terminal would act on) and every bidirectional-override character
/// (which reorders what is shown) written as a `\u{..}` escape, so a
/// name or metadata value read from a file prints as what it is.
///
/// NOTE [One terminal escape]: every path of this binary that prints
/// file- or argument-controlled text (listings, `--tensor` reports, error
/// messages, the prompt and generated text) goes through this function,
/// so no path can forget it; `terminal_safe_text` keeps line breaks and
/// tabs for multi-line text.
fn terminal_safe(text: &str) -> String {
    escaped(text, false)
}

/// [`terminal_safe`] for text whose line breaks and tabs are its layout.
fn terminal_safe_text(text: &str) -> String {
    escaped(text, true)
}

fn escaped(text: &str, keep_layout: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let bidi = matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}');
        let layout = keep_layout && matches!(c, '\n' | '\t');
        if (c.is_control() && !layout) || bidi {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

fn dtype_name(d: kael_core::DType) -> &'static str {
    use kael_core::DType;
    match d {
        DType::F32 => "F32",
        DType::F64 => "F64",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::I64 => "I64",
        DType::I32 => "I32",
        DType::I16 => "I16",
        DType::I8 => "I8",
        DType::U8 => "U8",
        DType::Bool => "BOOL",
    }
}

// ------------------------------------------------------------ generate

/// A model directory that passed [`validate_model_dir`].
struct ModelDir {
    weights: SafeTensorsFile,
    config_path: PathBuf,
    config: serde_json::Map<String, serde_json::Value>,
}

/// The device `--device` names.
fn device(arg: DeviceArg) -> Result<Device> {
    match arg {
        DeviceArg::Cpu => Ok(Device::cpu()),
        DeviceArg::Threaded => kael_host::cpu_threaded::device().map_err(Error::from),
        DeviceArg::Cuda => cuda_device(),
    }
}

#[cfg(feature = "cuda")]
fn cuda_device() -> Result<Device> {
    kael_host::cuda::device(0).map_err(|e| Error::Unsupported {
        op: "kael generate --device cuda",
        reason: format!("CUDA device 0 is not usable ({e}); run with --device cpu"),
    })
}

#[cfg(not(feature = "cuda"))]
fn cuda_device() -> Result<Device> {
    Err(Error::Unsupported {
        op: "kael generate --device cuda",
        reason: "this kael was built without CUDA support; rebuild it with \
                 `cargo build --release -p kael-host --features cuda`, or run with --device cpu"
            .into(),
    })
}

fn bad_model(reason: String) -> Error {
    Error::InvalidArgument {
        op: "kael generate --model",
        reason,
    }
}

/// Checks that `dir` holds a readable `model.safetensors` and a
/// `config.json` that is a JSON object; loads the weights onto `device`.
fn validate_model_dir(dir: &Path, device: &Device) -> Result<ModelDir> {
    const FIX: &str = "pass --model a directory holding model.safetensors and config.json (a Hugging Face GPT-2 snapshot)";
    if !dir.exists() {
        return Err(bad_model(format!(
            "the model directory {} does not exist; {FIX}",
            dir.display()
        )));
    }
    if !dir.is_dir() {
        return Err(bad_model(format!(
            "{} is not a directory; {FIX}",
            dir.display()
        )));
    }
    let weights = dir.join("model.safetensors");
    let config = dir.join("config.json");
    for f in [&weights, &config] {
        if !f.is_file() {
            return Err(bad_model(format!(
                "{} has no {}; {FIX}",
                dir.display(),
                f.file_name()
                    .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
            )));
        }
    }
    let text = std::fs::read_to_string(&config).map_err(|source| Error::Io {
        op: "read",
        path: config.clone(),
        source,
    })?;
    let config_value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::Format {
            path: config.clone(),
            reason: format!(
                "config.json is not valid JSON ({e}); restore it from the model's release"
            ),
        })?;
    let serde_json::Value::Object(config_map) = config_value else {
        return Err(Error::Format {
            path: config,
            reason: "config.json must be a JSON object (e.g. {\"n_layer\": 12, ...}); restore it from the model's release".into(),
        });
    };
    let weights = safetensors_io::load_on(&weights, device)?;
    Ok(ModelDir {
        weights,
        config_path: config,
        config: config_map,
    })
}

/// Loads the model and streams the prompt and its continuation to stdout
/// (returning nothing more to print), then prints the speed to stderr.
fn generate(args: &GenerateArgs, dir: ModelDir, device: &Device) -> Result<String> {
    let config = Gpt2Config::from_json(&dir.config).map_err(|reason| Error::Format {
        path: dir.config_path.clone(),
        reason,
    })?;
    let model = Gpt2::from_safetensors(config, &dir.weights, device)?;
    drop(dir); // the model's tensors keep the memory map alive
    let tok = Gpt2Tokenizer::new()?;
    let mut prompt = tok.encode(&args.prompt)?;
    if prompt.is_empty() {
        // GPT-2 starts unconditioned text from <|endoftext|>.
        prompt.push(Gpt2Tokenizer::EOT);
    }
    let max_new = args.max_tokens as usize;
    let mut sampler = Sampler::new(f64::from(args.temperature), args.top_k, args.seed)?;
    let mut out = std::io::stdout().lock();
    let write = |out: &mut std::io::StdoutLock<'_>, s: &str| {
        // A closed pipe (`kael generate ... | head`) is not an error.
        // the prompt and the vocabulary's text go through the one escape
        let s = terminal_safe_text(s);
        let _ = out.write_all(s.as_bytes()).and_then(|()| out.flush());
    };
    write(&mut out, &args.prompt);
    let mut stream = tok.stream();
    let start = std::time::Instant::now();
    let mut first: Option<std::time::Duration> = None;
    let ids = kael_host::gpt2::generate(
        &model,
        &prompt,
        max_new,
        &mut sampler,
        Decode::Cached,
        |id| {
            first.get_or_insert_with(|| start.elapsed());
            let text = stream.push(id)?;
            write(&mut out, &text);
            Ok(())
        },
    )?;
    let total = start.elapsed().as_secs_f64();
    write(&mut out, &stream.finish());
    write(&mut out, "\n");
    drop(out);
    let first = first.map_or(0.0, |d| d.as_secs_f64());
    let n = ids.len();
    let rate = if n > 1 && total > first {
        (n - 1) as f64 / (total - first)
    } else {
        n as f64 / total.max(f64::MIN_POSITIVE)
    };
    eprintln!(
        "{n} tokens in {total:.2} s: {rate:.1} tokens/s (after a {}-token prompt, \
         first token {:.0} ms; {:?})",
        prompt.len(),
        first * 1e3,
        device
    );
    Ok(String::new())
}
