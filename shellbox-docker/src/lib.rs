//! shellbox docker backend (in progress).
