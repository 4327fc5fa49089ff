"""``workbench.export.export(model_or_path, fmt, out, ...)``: export a model and prove it on a real batch.

See :mod:`workbench.core.export`. Importing this module imports torch but not onnx (nor Qt).
"""

from workbench.core.export import FORMATS, ExportError, ExportReport, check_artifact, export

__all__ = ["export", "check_artifact", "ExportReport", "ExportError", "FORMATS"]
