"""Qt widgets: they show core data and send user intent to core."""
