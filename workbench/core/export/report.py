"""What an export did and whether its artifact answers as the PyTorch model does: :class:`ExportReport`.

Plain data (crosses threads and processes), written beside the export as
``export_report.json`` (:data:`REPORT_NAME`) and shown as lines by the command
line and the window. Qt-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from workbench.core.errors import WorkbenchError
from workbench.core.export.compare import OutputCheck
from workbench.core.export.divergence import ModuleDiff

__all__ = ["ExportError", "ExportReport", "REPORT_NAME"]

#: The report's file name, in the folder of the export (or inside an exported folder).
REPORT_NAME = "export_report.json"


class ExportError(WorkbenchError):
    """An export could not be made (the exporter refused the model, a missing extra, an unwritable path).

    Nothing was written at the target. The message is one line: the file or
    module, the reason, what to do.
    """


@dataclass
class ExportReport:
    """The result of :func:`workbench.export.export`.

    Attributes
    ----------
    format : str
        ``"onnx"``, ``"pt2"``, ``"safetensors"`` or ``"hf"``.
    path : str
        The file (or folder, for ``hf``) written.
    dtype : str
        ``"fp32"``, ``"fp16"`` or ``"bf16"``.
    exporter : str
        What made it: ``"torch.onnx dynamo"``, ``"torch.onnx torchscript (fallback)"``,
        ``"torch.export"``, ``"safetensors"``, ``"save_pretrained"``.
    fallback_reason : str
        First line of why the dynamo exporter failed, when the fallback was used; ``""`` else.
    dynamic_batch : bool
        The batch dimension is dynamic in the artifact.
    example : str
        The inputs it was checked on (``"x=(1, 3, 64, 64) float32"``).
    checked : bool
        The artifact was run and compared (False with ``check=False``).
    checks : list of OutputCheck
        One per output and batch size run.
    first_difference : ModuleDiff or None
        When a check failed: the first module whose output differs.
    notes : list of str
        What else the user should know (LoRA merged, a diagnosis that could not run).
    source : str
        The checkpoint or folder exported ("" for a model given as an object).
    seconds : float
        Wall time of the export and the check (s).
    """

    format: str
    path: str
    dtype: str = "fp32"
    exporter: str = ""
    fallback_reason: str = ""
    dynamic_batch: bool = False
    example: str = ""
    checked: bool = False
    checks: list[OutputCheck] = field(default_factory=list)
    first_difference: ModuleDiff | None = None
    notes: list[str] = field(default_factory=list)
    source: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """True when every check passed (and at least one ran), or nothing was to be checked."""
        return (not self.checked) or (bool(self.checks) and all(c.passed for c in self.checks))

    @property
    def summary(self) -> str:
        """One line: what was written and the verdict (``"model.onnx (onnx, fp32): check passed on 2 outputs"``)."""
        head = f"{Path(self.path).name} ({self.format}, {self.dtype})"
        if not self.checked:
            return f"{head}: written, not checked"
        failed = [c for c in self.checks if not c.passed]
        if not failed:
            return f"{head}: check passed ({len(self.checks)} outputs compared)"
        where = f"; {self.first_difference.module} differs first" if self.first_difference else ""
        return f"{head}: check FAILED on {len(failed)} of {len(self.checks)} outputs{where}"

    def lines(self) -> list[str]:
        """The report as lines of text: what was written, how, each output's check, the first module that differs."""
        how = ", ".join(x for x in (self.format, self.dtype, self.exporter, "dynamic batch" * self.dynamic_batch) if x)
        out = [f"{'wrote' if self.exporter else 'checked'} {self.path} ({how})"]
        if self.fallback_reason:
            out.append(f"the dynamo exporter failed ({self.fallback_reason}); used the TorchScript exporter")
        if self.checked:
            out.append(f"checked on {self.example}")
            out += [f"  {c.line()}" for c in self.checks]
        if self.first_difference is not None:
            out.append(self.first_difference.line())
        out += self.notes
        out.append(self.summary)
        return out

    def to_dict(self) -> dict:
        """JSON-ready dict (the checks and the module diff as dicts)."""
        d = {k: v for k, v in self.__dict__.items() if k not in ("checks", "first_difference")}
        d["checks"] = [c.to_dict() for c in self.checks]
        d["first_difference"] = self.first_difference.to_dict() if self.first_difference else None
        d["passed"] = self.passed
        return d

    def to_json(self) -> str:
        """:meth:`to_dict` as indented JSON (non-finite differences as ``Infinity``)."""
        return json.dumps(self.to_dict(), indent=2)
