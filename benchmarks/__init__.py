"""Speed and memory figures (``make bench``). Never pass/fail tests."""
