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


def test_file_new_tabular_mlp_is_sized_for_the_csv_table(main_window, tmp_path):
    from workbench.core.model.tabular_mlp import TabularMLP

    win, panel = main_window
    table = Path(__file__).resolve().parents[3] / "examples" / "tabular" / "diabetes.csv"
    win.session._data_config_source = lambda: DataConfig(dataset="csv", root=str(table), target=["progression"])
    win.new_table_model_action.trigger()
    assert isinstance(win.model, TabularMLP) and win.arch_spec.name == "tabular_mlp"
    assert win.arch_spec.kwargs == {"in_features": 10, "num_outputs": 1}
    assert win.input_shape == (1, 10) and win.tree_model.root.output_shape == (1, 1)
    assert win.prompts.errors == []


def test_file_new_tabular_mlp_without_a_csv_says_what_to_choose(main_window):
    win, panel = main_window
    win.session._data_config_source = lambda: DataConfig(dataset="digits")
    win.new_table_model_action.trigger()
    assert win.prompts.errors and "choose a CSV table as the dataset in Training first" in win.prompts.errors[-1]
