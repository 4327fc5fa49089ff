"""core.probe."""
