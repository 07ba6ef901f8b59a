//! The host crate's error type: the core's errors plus files, formats and
//! text.
//!
//! Like the core's [`kael_core::Error`], every variant's `Display` names the
//! problem and ends with the fix.

use std::fmt;
use std::path::PathBuf;

/// `core::result::Result` with kael-host's [`Error`].
pub type Result<T> = core::result::Result<T, Error>;

/// Everything that can go wrong in kael-host.
///
/// ```
/// use kael_host::Error;
/// let e = kael_host::safetensors_io::load("/nonexistent/model.safetensors").unwrap_err();
/// assert!(matches!(e, Error::Io { .. }));
/// assert!(e.to_string().contains("/nonexistent/model.safetensors"));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An error from a tensor operation in the core.
    Core(kael_core::Error),
    /// Opening, reading, writing or renaming a file failed.
    Io {
        /// What was being done ("open", "map", "write", "rename", ...).
        op: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A file whose contents are not what its format requires.
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// A tensor stored in a dtype that kael has no dtype for.
    UnsupportedDType {
        /// The file.
        path: PathBuf,
        /// The tensor's name.
        tensor: String,
        /// The dtype as the file spells it (e.g. `F8_E4M3`).
        dtype: String,
    },
    /// An argument that cannot work (a bad name, a missing directory, ...).
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What is wrong and how to fix it.
        reason: String,
    },
    /// Something this build of kael-host does not provide (yet).
    Unsupported {
        /// The operation.
        op: &'static str,
        /// What is missing and what to do instead.
        reason: String,
    },
    /// The tokenizer could not be built or could not decode.
    Tokenizer {
        /// What is wrong and how to fix it.
        reason: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Core(e) => write!(f, "{e}"),
            Error::Io { op, path, source } => write!(
                f,
                "{}: cannot {op}: {source}; check that the path exists and is accessible",
                path.display()
            ),
            Error::Format { path, reason } => write!(f, "{}: {reason}", path.display()),
            Error::UnsupportedDType {
                path,
                tensor,
                dtype,
            } => write!(
                f,
                "{}: tensor '{tensor}' has dtype {dtype}, which kael does not support \
                 (supported: F32, F64, F16, BF16, I64, I32, U8, BOOL); convert the file's tensor \
                 to one of those (e.g. with PyTorch: t.to(torch.float32)) and save it again",
                path.display()
            ),
            Error::InvalidArgument { op, reason } => write!(f, "{op}: {reason}"),
            Error::Unsupported { op, reason } => write!(f, "{op}: {reason}"),
            Error::Tokenizer { reason } => write!(f, "tokenizer: {reason}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Core(e) => Some(e),
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<kael_core::Error> for Error {
    fn from(e: kael_core::Error) -> Self {
        Error::Core(e)
    }
}
