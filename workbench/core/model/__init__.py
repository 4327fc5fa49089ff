"""core.model."""
