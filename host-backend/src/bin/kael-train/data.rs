//! The training text: a character vocabulary, a train/validation split and
//! batch sampling.

use kael_core::{Device, Result, Rng, Tensor};

/// The Devil's Dictionary by Ambrose Bierce (1911; public domain), the
/// Internet Wiretap edition as Debian's `dict-devil` package ships it.
pub const TEXT: &str = include_str!("../../../data/devils-dictionary.txt");

pub struct Corpus {
    /// The distinct characters, sorted; a token id is an index into it.
    pub chars: Vec<char>,
    pub train: Vec<i64>,
    pub val: Vec<i64>,
}

impl Corpus {
    /// Tokenises `text` by character and keeps the last 10% for validation.
    pub fn new(text: &str) -> Self {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        let ids: Vec<i64> = text
            .chars()
            .map(|c| chars.binary_search(&c).map_or(0, |i| i as i64))
            .collect();
        let split = ids.len() * 9 / 10;
        Self {
            chars,
            train: ids[..split].to_vec(),
            val: ids[split..].to_vec(),
        }
    }

    /// An encoder/decoder for a saved vocabulary (sorted characters), with
    /// no text.
    pub fn from_vocab(chars: Vec<char>) -> Self {
        Self {
            chars,
            train: Vec::new(),
            val: Vec::new(),
        }
    }

    pub fn decode(&self, ids: &[i64]) -> String {
        ids.iter()
            .map(|&i| self.chars.get(i as usize).copied().unwrap_or('?'))
            .collect()
    }

    pub fn encode(&self, s: &str) -> Vec<i64> {
        s.chars()
            .filter_map(|c| self.chars.binary_search(&c).ok().map(|i| i as i64))
            .collect()
    }
}

/// Random start offsets of `batch` windows of `context + 1` tokens.
pub fn offsets(data: &[i64], batch: usize, context: usize, rng: &mut Rng) -> Vec<usize> {
    let span = (data.len() - context - 1) as u64;
    (0..batch).map(|_| rng.below(span) as usize).collect()
}

/// Inputs `[B, T]` and next-character targets `[B, T]` (I64) at `offsets`.
pub fn batch(
    data: &[i64],
    offsets: &[usize],
    context: usize,
    device: &Device,
) -> Result<(Tensor, Tensor)> {
    let mut x = Vec::with_capacity(offsets.len() * context);
    let mut y = Vec::with_capacity(offsets.len() * context);
    for &o in offsets {
        x.extend_from_slice(&data[o..o + context]);
        y.extend_from_slice(&data[o + 1..o + 1 + context]);
    }
    let shape = [offsets.len(), context];
    Ok((
        Tensor::from_slice(&x, &shape, device)?,
        Tensor::from_slice(&y, &shape, device)?,
    ))
}
