"""Tests of workbench.core.model.formats, one file per module."""
