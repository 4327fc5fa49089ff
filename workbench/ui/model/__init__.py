"""ui.model."""
