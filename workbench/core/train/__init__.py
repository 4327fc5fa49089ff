"""core.train."""
