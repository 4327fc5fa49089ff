"""The Runs dock: run folders side by side."""
