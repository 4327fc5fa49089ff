"""Dialogs that say what is so, briefly: the Partial-load question, the trust question, the Graph tab's caption,
the Runs table's model column (issue 44).

The Partial-load box dumped ``build_hf_model(architecture=…, config_json='{…}')`` past its edge; the trust
question said a run file "names Python code to build its model" when it named a dataset and a step; the Graph
tab showed raw torch.export / torch.fx errors as its caption; the Runs table showed
``workbench.core.model.hf_folder:build_hf_model``.
"""

from __future__ import annotations

import json
import time

import torch.nn as nn
from PySide6.QtWidgets import QMessageBox

from workbench.core.errors import TrustRequired
from workbench.core.model.formats.model_folder import HF_BUILDER
from workbench.core.model.loading import LoadReport
from workbench.core.model.spec import ArchSpec
from workbench.core.train.config import DataConfig, ModelConfig, TaskConfig, TrainConfig
from workbench.core.train.task.specs import check_trust
from workbench.ui import dialogs

LLAMA = ArchSpec(HF_BUILDER, {"architecture": "LlamaForCausalLM",
                              "config_json": json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
                                                         "num_hidden_layers": 22, "vocab_size": 32000})})


def test_the_partial_load_question_names_the_class_and_lists_what_is_missing(qtbot):
    from workbench.ui.prompts import Prompts

    missing = [f"model.layers.{i}.mlp.up_proj.weight" for i in range(6)]
    report = LoadReport(missing=missing, unexpected=["lm_head.bias"], mismatched=[], strict=True, loaded=200)
    shown = []
    prompts = Prompts(None)
    original = dialogs.load_report_dialog

    def capture(*args, **kwargs):
        box = original(*args, **kwargs)
        qtbot.addWidget(box)
        shown.append(box)
        box.exec = lambda: 0  # answered Cancel
        return box

    dialogs.load_report_dialog = capture
    try:
        assert prompts.partial_load(report, "/data/tiny-llama/model.safetensors", LLAMA) is False
    finally:
        dialogs.load_report_dialog = original
    box = shown[0]
    text = box.text() + box.informativeText()
    assert "LlamaForCausalLM" in box.text() and "build_hf_model" not in text and "config_json" not in text
    assert "model.safetensors" in box.text() and "/data/" not in box.text()
    assert "6 missing" in box.text() and "1 unexpected" in box.text()
    assert missing[0] in box.informativeText() and "and 2 more" in box.informativeText()
    assert missing[-1] not in box.informativeText() and missing[-1] in box.detailedText()  # behind Show details
    assert "build_hf_model" in box.detailedText()  # the whole spec is there too
    assert box.defaultButton() is box.button(QMessageBox.StandardButton.Cancel)


def test_the_trust_question_names_what_the_run_file_names_with_the_paths(qtbot, tmp_path):
    run_toml = tmp_path / "sent" / "run.toml"
    config = TrainConfig(data=DataConfig(dataset="my_data.py:load"),
                         task=TaskConfig(step="steps.py:step", metrics=["scores.py:f1"]),
                         model=ModelConfig(arch="digits_cnn"))
    try:
        check_trust(config, run_toml, trust=False)
    except TrustRequired as exc:
        err = exc
    else:
        raise AssertionError("a file naming code was not asked about")
    box = dialogs.trust_dialog(err)
    qtbot.addWidget(box)
    assert "names Python code for its dataset, training step and metric" in box.text()
    assert "build its model" not in box.text()
    info = box.informativeText()
    assert f"dataset: my_data.py:load ({tmp_path / 'sent' / 'my_data.py'})" in info
    assert f"training step: steps.py:step ({tmp_path / 'sent' / 'steps.py'})" in info
    assert "metric: scores.py:f1" in info and str(run_toml) in info
    assert box.defaultButton() is box.button(QMessageBox.StandardButton.Cancel)
    # a file that names its architecture says so
    arch = dialogs.trust_dialog(TrustRequired(tmp_path / "m.pt", ["my_pkg.nets:make"], kind="code",
                                              roles={"my_pkg.nets:make": "architecture"}))
    qtbot.addWidget(arch)
    assert "to build its model (its architecture)" in arch.text()
    assert "architecture: my_pkg.nets:make (module my_pkg.nets)" in arch.informativeText()


class _NeedsThree(nn.Module):
    """Takes 3 features; the Graph tab's example input (input shape 1, 8) does not fit it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x)


def test_the_graph_tab_says_it_could_not_capture_with_one_line_and_the_rest_behind_a_button(main_window, qtbot):
    win, _ = main_window
    win.session.set_model(_NeedsThree(), input_shape=(1, 8), source="needs-three")
    panel = win.graph_panel
    win.graph_dock.show()
    win.graph_dock.raise_()
    qtbot.waitUntil(lambda: panel.status.text().startswith("Could not capture"), timeout=20000)
    caption = panel.status.text()
    assert caption.startswith("Could not capture the dataflow of this model: ")
    assert "\n" not in caption and len(caption) < 200, caption
    assert "torch.export" not in caption and "symbolic_trace" not in caption  # the tracers' words are behind...
    assert panel.details_button.isVisible()
    assert "torch.export" in panel.details() and "forward-hook trace" in panel.details()  # ...the button
    box = panel.show_details()
    assert box is not None and box.detailedText() == panel.details()
    box.close()
    # a model that is captured: no button
    win.session.set_model(nn.Sequential(nn.Linear(8, 4), nn.ReLU()), input_shape=(1, 8), source="mlp")
    qtbot.waitUntil(lambda: panel.status.text().startswith("Captured"), timeout=20000)
    assert not panel.details_button.isVisible()


def test_the_runs_table_shows_the_models_short_name(qtbot, tmp_path):
    from workbench.core.train.runs.folder import write_status
    from workbench.core.train.trainer.run_record import status_info
    from workbench.ui.runs.runs_panel import COLUMNS, RunsPanel

    run = tmp_path / "runs" / "llama-ft"
    run.mkdir(parents=True)
    config = TrainConfig(model=ModelConfig(arch=HF_BUILDER, kwargs=dict(LLAMA.kwargs), source="/models/tiny-llama"))
    config.to_toml(run / "run.toml")
    write_status(run, "completed", time.time(), status_info(config))  # as the trainer writes it
    panel = RunsPanel(tmp_path / "runs")
    qtbot.addWidget(panel)
    panel.refresh()
    assert panel.table_model.rowCount() == 1
    assert panel.table_model.index(0, COLUMNS.index("model")).data() == "LlamaForCausalLM"
    (run / "status.json").unlink()  # a run folder with its run.toml alone says the same
    panel.refresh()
    assert panel.table_model.index(0, COLUMNS.index("model")).data() == "LlamaForCausalLM"
