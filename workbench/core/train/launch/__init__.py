"""Everything that starts a run somewhere: a thread, the training process, torchrun ranks, headless `workbench train`."""
