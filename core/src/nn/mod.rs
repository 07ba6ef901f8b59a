//! Neural-network layers (filled in by its issue).
