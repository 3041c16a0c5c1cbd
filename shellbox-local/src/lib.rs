//! shellbox local backend (in progress).
