"""View > Shapes from the training data: the tree's shapes and FLOPs from a real batch of a user's dataset."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from workbench.core.train.config import DataConfig

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "text"


def test_a_token_id_dataset_gives_the_tree_its_shapes(main_window):
    win, panel = main_window
    spec = importlib.util.spec_from_file_location("text_task_tree_test", EXAMPLE / "text_task.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    win.session.set_model(module.TinyTextClassifier(), source="text model")
    win.session._data_config_source = lambda: DataConfig(dataset=f"{EXAMPLE}/text_task.py:make_dataset",
                                                         kwargs={"n": 40})
    win.shapes_from_data_action.trigger()
    root = win.tree_model.root
    shapes = {n.name: n.output_shape for n in root.walk()}
    assert shapes["embed"] == (2, 24, 32) and shapes["head"] == (2, 2)  # a batch of 2 sequences of 24 ids
    assert root.flops > 0
    assert "input_ids=(2, 24) int64" in win.statusBar().currentMessage()
