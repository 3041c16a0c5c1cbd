//! shellbox sim backend (in progress).
