"""ui.probe."""
