"""File > Open model folder: a Hugging Face folder opens as its model, with shapes and FLOPs in the tree."""

from __future__ import annotations

import transformers  # in the test extra (the window itself works without it)
from PySide6.QtGui import QAction


def test_a_bert_folder_opens_with_shapes_and_flops(main_window, tmp_path):
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, vocab_size=100, num_labels=3)
    folder = tmp_path / "bert"
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    win, panel = main_window
    win.prompts.answers["open_folder"] = str(folder)
    win.findChild(QAction, "openFolderAction").trigger()
    assert type(win.model).__name__ == "BertForSequenceClassification"
    # the one question is the folder itself: no architecture question (the config says which)
    assert win.prompts.errors == [] and [a[0] for a in win.prompts.asked] == ["open_folder"]
    root = win.tree_model.root
    assert root.flops > 0
    assert root.find("classifier").output_shape == (1, 3)  # the config's example: input_ids (1, 16)


def test_a_timm_model_gets_its_pretrained_cfg_input_size(main_window):
    """File > New from architecture timm/efficientnet_b3: the tree's shapes for 288 x 288, timm's own size."""
    from workbench.core.model.spec import ArchSpec

    win, _ = main_window
    assert win.new_from_architecture(ArchSpec("timm/efficientnet_b3", {"num_classes": 4}))
    assert win.input_shape == (1, 3, 288, 288) and win.tree_model.root.output_shape == (1, 4)
