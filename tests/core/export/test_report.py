"""The report as lines, one summary and JSON."""

from __future__ import annotations

import json

from workbench.core.export.compare import OutputCheck
from workbench.core.export.divergence import ModuleDiff
from workbench.core.export.report import ExportReport


def test_a_failed_report_names_the_fallback_the_output_and_the_module():
    report = ExportReport("onnx", "/x/m.onnx", exporter="torch.onnx torchscript (fallback)",
                          fallback_reason="GuardOnDataDependentSymNode: ...", checked=True, example="(1, 4) float32")
    report.checks = [OutputCheck("output", 1, [1, 2], float("inf"), float("inf"), 1e-4, 1e-3, False, "shape")]
    report.first_difference = ModuleDiff("2.1", "Scale", 0, 0.5, 0.5, 1e-4, 1e-3, ["2.0"], 3)
    text = "\n".join(report.lines())
    assert "used the TorchScript exporter" in text and "output (batch 1)" in text and "FAIL - shape" in text
    assert "first module that differs: 2.1 (Scale)" in text and "may start in 2.0" in text
    assert not report.passed and report.summary.endswith("2.1 differs first")
    saved = json.loads(report.to_json())
    assert saved["passed"] is False and saved["checks"][0]["max_abs"] == float("inf")
    assert saved["first_difference"]["module"] == "2.1"


def test_an_unchecked_report_passes_and_says_so():
    report = ExportReport("safetensors", "/x/w.safetensors", exporter="safetensors")
    assert report.passed and report.summary == "w.safetensors (safetensors, fp32): written, not checked"
