"""Workbench: a desktop workbench for PyTorch models."""

__version__ = "0.1.0"
