//! The contract tests every backend runs (filled in next).
