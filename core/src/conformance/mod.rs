//! The backend conformance suite (filled in by its issue).
