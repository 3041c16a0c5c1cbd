//! shellbox pyenv backend (in progress).
