"""The docker backend."""
