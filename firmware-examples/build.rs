//! Linker set-up that works from any directory (`.cargo/config.toml` is only
//! read from the current directory, and an ELF linked without `-Tlink.x` has
//! no vector table): picks the memory map for the target, passes cortex-m-rt's
//! `link.x` (and defmt's `defmt.x` with the `defmt` feature), and sets the
//! `kael_m0` cfg on thumbv6m (smaller heap and arena).
use std::{env, fs, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(env::var_os("OUT_DIR").ok_or("OUT_DIR not set")?);
    let target = env::var("TARGET")?;
    println!("cargo:rustc-check-cfg=cfg(kael_m0)");
    let memory = if target.starts_with("thumbv6m") {
        println!("cargo:rustc-cfg=kael_m0");
        "memory-m0.x"
    } else {
        "memory-m4.x"
    };
    fs::copy(memory, out.join("memory.x"))?;
    // cortex-m-rt's `device` feature includes `device.x`, where a device
    // crate names its interrupt handlers; `vectors.rs` points every entry
    // at `DefaultHandler` itself, so there is nothing to name.
    fs::write(
        out.join("device.x"),
        "/* no named interrupt handlers: see src/vectors.rs */\n",
    )?;
    println!("cargo:rustc-link-search={}", out.display());
    if target.starts_with("thumb") {
        println!("cargo:rustc-link-arg-bins=--nmagic");
        println!("cargo:rustc-link-arg-bins=-Tlink.x");
        if env::var_os("CARGO_FEATURE_DEFMT").is_some() {
            println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
        }
    }
    println!("cargo:rerun-if-changed=memory-m0.x");
    println!("cargo:rerun-if-changed=memory-m4.x");
    println!("cargo:rerun-if-changed=build.rs");
    Ok(())
}
