//! Optimizers (filled in by its issue).
