"""The shellsim backend."""
