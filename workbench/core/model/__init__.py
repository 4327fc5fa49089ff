"""A model you can open, read and edit: checkpoints, architectures, the one open policy, the tree, freezing, edits.

Never imports ``core.train`` or ``core.probe`` (an import-linter contract).
"""
