"""Generation backends of the streaming schedule, one module each; see `base.TokenBackend`."""
