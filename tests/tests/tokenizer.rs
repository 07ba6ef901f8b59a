//! GPT-2's tokenizer (`kael_host::tokenizer::Gpt2Tokenizer`).
//!
//! Expected ids come from an independent implementation: OpenAI's original
//! GPT-2 `encoder.py` algorithm (byte-to-unicode table, regex
//! pre-tokenisation, rank-ordered BPE merges), written in Python with the
//! `regex` module and run on GPT-2's released `encoder.json`/`vocab.bpe`.
//! "Hello world" -> [15496, 995] is also the widely quoted GPT-2 example.
//! The reference (tiktoken-rs ships GPT-2's two files in its `assets/`):
//!
//! ```text
//! # python3 gpt2_encoder.py ~/.cargo/registry/src/*/tiktoken-rs-0.12.1/assets
//! # Independent reference: OpenAI's original GPT-2 encoder.py algorithm (byte-level BPE),
//! # run on GPT-2's released encoder.json / vocab.bpe.
//! import json, regex as re, sys
//! A = sys.argv[1]
//! def bytes_to_unicode():
//!     bs = list(range(ord("!"), ord("~")+1))+list(range(ord("¡"), ord("¬")+1))+list(range(ord("®"), ord("ÿ")+1))
//!     cs = bs[:]; n = 0
//!     for b in range(256):
//!         if b not in bs:
//!             bs.append(b); cs.append(256+n); n += 1
//!     return dict(zip(bs, [chr(c) for c in cs]))
//! def get_pairs(word):
//!     return set(zip(word[:-1], word[1:]))
//! encoder = json.load(open(A + "/encoder.json"))
//! merges = [tuple(l.split()) for l in open(A + "/vocab.bpe", encoding="utf-8").read().split("\n")[1:-1]]
//! ranks = dict(zip(merges, range(len(merges))))
//! be = bytes_to_unicode()
//! pat = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
//! def bpe(token):
//!     word = tuple(token); pairs = get_pairs(word)
//!     if not pairs: return [token]
//!     while True:
//!         bigram = min(pairs, key=lambda p: ranks.get(p, float("inf")))
//!         if bigram not in ranks: break
//!         first, second = bigram; new = []; i = 0
//!         while i < len(word):
//!             try:
//!                 j = word.index(first, i); new.extend(word[i:j]); i = j
//!             except ValueError:
//!                 new.extend(word[i:]); break
//!             if word[i] == first and i < len(word)-1 and word[i+1] == second:
//!                 new.append(first+second); i += 2
//!             else:
//!                 new.append(word[i]); i += 1
//!         word = tuple(new)
//!         if len(word) == 1: break
//!         pairs = get_pairs(word)
//!     return list(word)
//! def encode(text):
//!     out = []
//!     for tok in re.findall(pat, text):
//!         tok = "".join(be[b] for b in tok.encode("utf-8"))
//!         out.extend(encoder[t] for t in bpe(tok))
//!     return out
//! print(len(encoder), encoder["<|endoftext|>"])   # 50257 50256
//! for s in ["Hello world", ...]: print(repr(s), encode(s))
//! ```
use kael_host::tokenizer::Gpt2Tokenizer;

fn tok() -> Gpt2Tokenizer {
    Gpt2Tokenizer::new().unwrap()
}

/// (text, ids from the reference encoder.py)
const KNOWN: &[(&str, &[u32])] = &[
    ("Hello world", &[15496, 995]),
    ("Hello, world!", &[15496, 11, 995, 0]),
    (
        " The quick brown fox jumps over the lazy dog.",
        &[383, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13],
    ),
    ("naïve café", &[2616, 38776, 40304]),
    (
        "日本語のテキスト",
        &[33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302],
    ),
    (
        "I'm here; they've gone, we'll see",
        &[40, 1101, 994, 26, 484, 1053, 3750, 11, 356, 1183, 766],
    ),
    (
        "  leading and trailing spaces  ",
        &[220, 3756, 290, 25462, 9029, 220, 220],
    ),
    (
        "tabs\tand\nnew lines\n\n",
        &[8658, 82, 197, 392, 198, 3605, 3951, 628],
    ),
    (
        "1234567 + 89 = 1234656",
        &[10163, 2231, 3134, 1343, 9919, 796, 1105, 2682, 37466],
    ),
    ("🦀 Rust", &[8582, 99, 222, 17103]),
    (
        "antidisestablishmentarianism",
        &[415, 29207, 44390, 3699, 1042],
    ),
];

#[test]
fn encode_matches_gpt2_reference_ids() {
    let t = tok();
    for (text, ids) in KNOWN {
        assert_eq!(t.encode(text).unwrap(), *ids, "text {text:?}");
    }
}

#[test]
fn decode_inverts_encode_on_known_strings() {
    let t = tok();
    for (text, ids) in KNOWN {
        assert_eq!(t.decode(ids).unwrap(), *text, "ids {ids:?}");
    }
}

#[test]
fn endoftext_is_plain_text_in_encode() {
    // reference encoder.py: "<|endoftext|>" -> [27, 91, 437, 1659, 5239, 91, 29]
    assert_eq!(
        tok().encode("<|endoftext|>").unwrap(),
        [27, 91, 437, 1659, 5239, 91, 29]
    );
}

#[test]
fn endoftext_is_one_id_with_special_tokens() {
    assert_eq!(
        tok().encode_with_special_tokens("Hi<|endoftext|>").unwrap(),
        [17250, Gpt2Tokenizer::EOT]
    );
    assert_eq!(
        tok().decode(&[Gpt2Tokenizer::EOT]).unwrap(),
        "<|endoftext|>"
    );
}

#[test]
fn vocabulary_constants_are_gpt2s() {
    // encoder.json has 50257 entries and maps "<|endoftext|>" to 50256.
    assert_eq!(Gpt2Tokenizer::VOCAB_SIZE, 50257);
    assert_eq!(Gpt2Tokenizer::EOT, 50256);
}

#[test]
fn decode_rejects_an_id_outside_the_vocabulary() {
    let e = tok().decode(&[15496, 50257]).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("50257") && msg.contains("vocabulary"), "{msg}");
}

#[test]
fn decode_replaces_a_split_character_like_hugging_face() {
    // "🦀" is ids [8582, 99, 222]; the first alone is 3 of its 4 bytes.
    assert_eq!(tok().decode(&[8582]).unwrap(), "\u{FFFD}");
    assert_eq!(
        tok().decode_bytes(&[8582, 99, 222]).unwrap(),
        "🦀".as_bytes()
    );
}

#[test]
fn stream_holds_back_a_character_split_across_tokens() {
    let t = tok();
    let mut s = t.stream();
    // ids of "🦀 Rust": the crab's 4 bytes arrive over 3 tokens.
    assert_eq!(s.push(8582).unwrap(), "");
    assert_eq!(s.push(99).unwrap(), "");
    assert_eq!(s.push(222).unwrap(), "🦀");
    assert_eq!(s.push(17103).unwrap(), " Rust");
    assert_eq!(s.finish(), "");
}

#[test]
fn stream_concatenation_equals_decode() {
    let t = tok();
    for (text, ids) in KNOWN {
        let mut s = t.stream();
        let mut out = String::new();
        for &id in *ids {
            out += &s.push(id).unwrap();
        }
        out += &s.finish();
        assert_eq!(out, *text);
    }
}

#[test]
fn stream_finish_replaces_an_incomplete_character() {
    let t = tok();
    let mut s = t.stream();
    assert_eq!(s.push(8582).unwrap(), "");
    assert_eq!(s.finish(), "\u{FFFD}");
}

#[test]
fn stream_push_of_a_bad_id_is_an_error() {
    let t = tok();
    let mut s = t.stream();
    assert!(s.push(u32::MAX).is_err());
    assert_eq!(s.push(15496).unwrap(), "Hello");
}

#[test]
fn empty_text_has_no_ids() {
    assert_eq!(tok().encode("").unwrap(), Vec::<u32>::new());
    assert_eq!(tok().decode(&[]).unwrap(), "");
}

#[test]
fn long_whitespace_run_encodes_without_failing() {
    // 10k spaces then a word: a regex-heavy input; must not fail or panic.
    let text = format!("{}x", " ".repeat(10_000));
    let ids = tok().encode(&text).unwrap();
    assert_eq!(tok().decode(&ids).unwrap(), text);
}
