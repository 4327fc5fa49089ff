"""Optional ecosystem libraries are extras: importing Workbench (core, the window, the CLI) imports none of them."""

from __future__ import annotations

import subprocess
import sys

EXTRAS = ("timm", "transformers", "accelerate", "peft", "lightning", "pytorch_lightning", "lightning_fabric",
          "torchmetrics", "pandas", "tensorboard")


def test_importing_workbench_imports_no_optional_library():
    code = ("import sys, workbench, workbench.cli, workbench.ui.main_window, workbench.core.train.trainer.loop, "
            "workbench.core.train.launch.headless, workbench.core.model.opening, workbench.core.attach.script, "
            "workbench.core.attach.client, workbench.integrations\n"
            f"print(','.join(m for m in {EXTRAS!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"QT_QPA_PLATFORM": "offscreen", "PATH": ""}).stdout.strip()
    assert out == ""
