"""Ship a trained model: ONNX, ``torch.export`` (``.pt2``), safetensors and Hugging Face folders, proven on a batch.

:func:`export` writes the artifact, runs it beside the PyTorch model and
returns an :class:`ExportReport` (one :class:`~workbench.core.export.compare.OutputCheck`
per output; the first module that differs when one does). Qt-free; onnx,
onnxscript and onnxruntime (the ``export`` extra) are imported only by an ONNX export.
"""

from workbench.core.export.api import FORMATS, check_artifact, export, target_path
from workbench.core.export.report import REPORT_NAME, ExportError, ExportReport

__all__ = ["export", "check_artifact", "target_path", "FORMATS", "ExportReport", "ExportError", "REPORT_NAME"]
