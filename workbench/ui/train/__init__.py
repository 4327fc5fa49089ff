"""The Training wing: the Training panel, its settings form and memory, live plots, progress, the run controller."""
