//! Files written or placed by someone else: stale temporaries of
//! interrupted saves, non-regular files, headers naming a tensor twice, and
//! names and metadata holding terminal control characters.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code: a panic is a failing test

use kael_core::{DType, Device, Tensor};
use kael_host::safetensors_io::{load, save, save_with_metadata};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("kael-hostile-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn small() -> Tensor {
    Tensor::zeros(&[2], DType::F32, &Device::cpu()).unwrap()
}

/// The id of a process that has exited (and been reaped).
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
#[cfg(target_os = "linux")]
fn a_save_removes_the_temporaries_of_interrupted_saves_of_that_path() {
    let dir = TempDir::new("stale");
    let stale = format!(".m.safetensors.kael-tmp-{}-0", dead_pid());
    let live = format!(
        ".m.safetensors.kael-tmp-{}-0",
        std::os::unix::process::parent_id()
    );
    let other = format!(".n.safetensors.kael-tmp-{}-0", dead_pid());
    for name in [&stale, &live, &other] {
        std::fs::write(dir.path(name), b"partial").unwrap();
    }
    save(dir.path("m.safetensors"), &[("w", &small())]).unwrap();
    let mut want = vec![live, other, "m.safetensors".to_string()];
    want.sort();
    assert_eq!(dir.names(), want);
}

#[test]
#[cfg(unix)]
fn loading_a_fifo_is_refused_without_blocking() {
    let dir = TempDir::new("fifo");
    let fifo = dir.path("pipe.safetensors");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || {
        let _ = tx.send(load(&path).map(|_| ()).map_err(|e| e.to_string()));
    });
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("load blocked on a FIFO");
    let err = got.unwrap_err();
    assert!(err.contains("not a regular file"), "{err}");
}

/// A safetensors file with `header` as its JSON and `data` after it.
fn raw_file(path: &Path, header: &str, data: &[u8]) {
    let mut h = header.as_bytes().to_vec();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(&h);
    bytes.extend_from_slice(data);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_header_naming_a_tensor_twice_is_refused() {
    // both entries cover the same 4 bytes, so nothing else gives it away
    let dir = TempDir::new("dup");
    let path = dir.path("dup.safetensors");
    let entry = r#"{"dtype":"F32","shape":[1],"data_offsets":[0,4]}"#;
    raw_file(&path, &format!(r#"{{"a":{entry},"a":{entry}}}"#), &[0; 4]);
    let err = load(&path).map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("two entries named 'a'"), "{err}");
}

#[test]
fn a_name_repeated_through_a_json_escape_is_refused() {
    // "\u0061" is "a" once unescaped
    let dir = TempDir::new("escaped");
    let path = dir.path("x.safetensors");
    let entry = r#"{"dtype":"F32","shape":[1],"data_offsets":[0,4]}"#;
    raw_file(
        &path,
        &format!(r#"{{"a":{entry},"\u0061":{entry}}}"#),
        &[0; 4],
    );
    let err = load(&path).map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("two entries named 'a'"), "{err}");
}

#[test]
fn metadata_keys_that_repeat_a_tensor_name_are_no_duplicate() {
    let dir = TempDir::new("meta");
    let path = dir.path("x.safetensors");
    let entry = r#"{"dtype":"F32","shape":[1],"data_offsets":[0,4]}"#;
    raw_file(
        &path,
        &format!(r#"{{"__metadata__":{{"a":"a:"}},"a":{entry}}}"#),
        &[0; 4],
    );
    assert_eq!(load(&path).unwrap().len(), 1);
}

#[test]
fn kael_inspect_escapes_control_characters_in_names_and_metadata() {
    let dir = TempDir::new("inspect");
    let path = dir.path("evil.safetensors");
    let mut meta = BTreeMap::new();
    meta.insert("note".to_string(), "bell\u{7} and\nnewline".to_string());
    save_with_metadata(&path, &[("red\u{1b}[31m\u{202e}name", &small())], &meta).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kael"))
        .args(["inspect", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for bad in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!text.contains(bad), "{bad:?} printed raw:\n{text}");
    }
    assert!(text.contains(r"red\u{1b}[31m\u{202e}name"), "{text}");
    assert!(text.contains(r"bell\u{7} and\u{a}newline"), "{text}");
}

/// The raw bytes a terminal would act on (or that reorder what it shows).
const RAW: [char; 3] = ['\u{1b}', '\u{7}', '\u{202e}'];

#[test]
fn kael_inspect_escapes_a_hostile_file_on_its_error_path() {
    // a name and a dtype (JSON escapes of ESC, BEL and RLO) that the
    // unsupported-dtype error quotes back
    let dir = TempDir::new("inspect-error");
    let path = dir.path("evil.safetensors");
    let header = br#"{"a\u001b[31m\u202e": {"dtype": "X\u001b]0;t\u0007", "shape": [1], "data_offsets": [0, 4]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    bytes.extend_from_slice(&[0; 4]);
    std::fs::write(&path, bytes).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kael"))
        .args(["inspect", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(err.starts_with("error: ") && err.contains("dtype"), "{err}");
    for bad in RAW {
        assert!(!err.contains(bad), "{bad:?} printed raw on stderr:\n{err}");
    }
}

#[test]
fn kael_inspect_escapes_the_tensor_argument_it_cannot_find() {
    let dir = TempDir::new("inspect-arg");
    let path = dir.path("w.safetensors");
    save_with_metadata(&path, &[("w", &small())], &BTreeMap::new()).unwrap();
    let name = "x\u{1b}]0;pwned\u{7}\u{202e}";
    let out = Command::new(env!("CARGO_BIN_EXE_kael"))
        .args(["inspect", path.to_str().unwrap(), "--tensor", name])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(err.contains("has no tensor named"), "{err}");
    for bad in RAW {
        assert!(!err.contains(bad), "{bad:?} printed raw on stderr:\n{err}");
    }
}
