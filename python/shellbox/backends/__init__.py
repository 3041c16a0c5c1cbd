"""The backends: ``local`` (bubblewrap), ``docker`` (Docker Engine), ``shellsim`` (simulator)."""
