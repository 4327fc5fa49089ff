"""The Training wing: the Training panel, its settings form, live plots and the QThread worker."""
