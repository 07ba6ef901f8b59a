//! The interrupt part of the vector table.
//!
//! The examples handle no interrupts, so every entry is cortex-m-rt's
//! `DefaultHandler`. There are 32 entries: the IRQ count of the CMSDK
//! peripherals on the MPS2 boards (mps2-an386) and of the nRF51 (micro:bit),
//! what a device crate for either board would link. Without cortex-m-rt's
//! `device` feature, cortex-m-rt links 240 entries (960 B of flash in every
//! example).

/// One entry: the handler's address.
pub type Vector = unsafe extern "C" fn();

unsafe extern "C" {
    /// cortex-m-rt's default exception and interrupt handler (it loops).
    fn DefaultHandler();
}

/// The IRQ count the table covers.
pub const IRQS: usize = 32;

/// The interrupt vectors, placed after the 16 exception vectors by
/// cortex-m-rt's `link.x`.
#[unsafe(link_section = ".vector_table.interrupts")]
#[unsafe(no_mangle)]
pub static __INTERRUPTS: [Vector; IRQS] = [DefaultHandler; IRQS];
