"""ui.train."""
