//! Sets `cfg(kael_arm_dsp)` for targets whose cores all have Arm's DSP
//! extension (Cortex-M4/M7: `thumbv7em-*`), where the int8 dot product uses
//! `SXTAB16`/`SMLAD` (NOTE [DSP dot product] in src/quant/dot.rs).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(kael_arm_dsp)");
    println!("cargo::rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.starts_with("thumbv7em-") {
        println!("cargo::rustc-cfg=kael_arm_dsp");
    }
}
