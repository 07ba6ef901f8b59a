//! GPT-2's byte-level BPE tokenizer.
//!
//! This wraps `tiktoken-rs`'s `r50k_base` encoding, which is GPT-2's
//! vocabulary and merges (50,257 ids, `<|endoftext|>` = 50256) and ships
//! inside the crate: nothing is downloaded. Its ids match Hugging Face's
//! `gpt2` tokenizer (the tests check known strings against an independent
//! implementation of OpenAI's original `encoder.py`).
//!
//! ```
//! use kael_host::tokenizer::Gpt2Tokenizer;
//! let tok = Gpt2Tokenizer::new()?;
//! let ids = tok.encode("Hello world")?;
//! assert_eq!(ids, [15496, 995]);
//! assert_eq!(tok.decode(&ids)?, "Hello world");
//! # Ok::<(), kael_host::Error>(())
//! ```

use crate::safetensors_io::error::{Error, Result};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use tiktoken_rs::CoreBPE;

/// The encoding, built once per process (parsing the ranks takes a while).
static R50K: OnceLock<core::result::Result<CoreBPE, String>> = OnceLock::new();

/// GPT-2's tokenizer (a cheap handle to one shared encoding).
#[derive(Clone, Copy)]
pub struct Gpt2Tokenizer {
    bpe: &'static CoreBPE,
}

impl core::fmt::Debug for Gpt2Tokenizer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Gpt2Tokenizer(r50k_base)")
    }
}

impl Gpt2Tokenizer {
    /// The `<|endoftext|>` id, which GPT-2 also uses as its start token.
    pub const EOT: u32 = 50256;
    /// Number of ids (50,000 merges + 256 bytes + `<|endoftext|>`).
    pub const VOCAB_SIZE: usize = 50257;

    /// The tokenizer. The first call in a process builds the encoding from
    /// the ranks embedded in `tiktoken-rs`.
    ///
    /// # Errors
    /// [`Error::Tokenizer`] if the embedded encoding cannot be built (a
    /// broken `tiktoken-rs` install).
    pub fn new() -> Result<Self> {
        let built = R50K.get_or_init(|| {
            catch_unwind(tiktoken_rs::r50k_base)
                .map_err(|_| "building r50k_base panicked".to_string())
                .and_then(|r| r.map_err(|e| e.to_string()))
        });
        match built {
            Ok(bpe) => Ok(Self { bpe }),
            Err(e) => Err(Error::Tokenizer {
                reason: format!(
                    "cannot build GPT-2's r50k_base encoding ({e}); reinstall the tiktoken-rs crate (cargo clean -p tiktoken-rs)"
                ),
            }),
        }
    }

    /// The ids of `text`. Special-token text such as `<|endoftext|>` is
    /// encoded as ordinary text (so user input cannot inject control ids).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] if the encoder fails on the input (its regex
    /// engine has a backtracking limit).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        guarded(|| self.bpe.encode_ordinary(text))
    }

    /// The ids of `text`, with `<|endoftext|>` encoded as [`Self::EOT`].
    ///
    /// # Errors
    /// As [`Self::encode`].
    pub fn encode_with_special_tokens(&self, text: &str) -> Result<Vec<u32>> {
        guarded(|| self.bpe.encode_with_special_tokens(text))
    }

    /// The bytes of `ids`, concatenated (GPT-2's tokens are byte strings; a
    /// multi-byte character may be split across tokens).
    ///
    /// # Errors
    /// [`Error::Tokenizer`] naming the first id outside `0..VOCAB_SIZE`.
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>> {
        self.bpe.decode_bytes(ids).map_err(|e| Error::Tokenizer {
            reason: format!(
                "token id {} is not in GPT-2's vocabulary (0..{}); pass ids produced by this tokenizer or a GPT-2 model",
                e.token,
                Self::VOCAB_SIZE
            ),
        })
    }

    /// The text of `ids`. Bytes that are not valid UTF-8 become U+FFFD, as
    /// in Hugging Face's `decode` (`errors="replace"`).
    ///
    /// # Errors
    /// As [`Self::decode_bytes`].
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned())
    }

    /// An incremental decoder for streaming generated ids as text.
    pub fn stream(&self) -> StreamDecoder {
        StreamDecoder {
            tok: *self,
            pending: Vec::new(),
        }
    }
}

fn guarded<T>(f: impl FnOnce() -> T) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|_| Error::Tokenizer {
        reason: "the BPE encoder failed on this input (regex backtracking limit); split the text into shorter pieces".into(),
    })
}

/// Turns ids into text one at a time, holding back the bytes of a
/// character that is split across tokens until it is complete.
///
/// ```
/// use kael_host::tokenizer::Gpt2Tokenizer;
/// let tok = Gpt2Tokenizer::new()?;
/// let mut stream = tok.stream();
/// let mut text = String::new();
/// for id in tok.encode("naïve café")? {
///     text += &stream.push(id)?;
/// }
/// text += &stream.finish();
/// assert_eq!(text, "naïve café");
/// # Ok::<(), kael_host::Error>(())
/// ```
#[derive(Debug)]
pub struct StreamDecoder {
    tok: Gpt2Tokenizer,
    pending: Vec<u8>,
}

impl StreamDecoder {
    /// Adds one id and returns the text that is now complete (possibly
    /// empty).
    ///
    /// # Errors
    /// As [`Gpt2Tokenizer::decode_bytes`]; the decoder is unchanged then.
    pub fn push(&mut self, id: u32) -> Result<String> {
        let bytes = self.tok.decode_bytes(&[id])?;
        self.pending.extend_from_slice(&bytes);
        let valid = self.pending.len() - incomplete_tail(&self.pending);
        let rest = self.pending.split_off(valid);
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending = rest;
        Ok(out)
    }

    /// The held-back bytes, if any, as text (U+FFFD for an incomplete
    /// character).
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }
}

/// How many bytes at the end of `b` start a UTF-8 character that is not
/// complete yet (0 when the end is complete, or invalid anyway).
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=b.len().min(3) {
        let Some(&byte) = b.get(b.len() - back) else {
            break;
        };
        if byte & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back for the lead
        }
        let need = match byte {
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        return if need > back { back } else { 0 };
    }
    0
}
