"""LoRA adapters from the model tree's context menu (issue 27): dialog, tree, trainable count, undo / redo."""

from __future__ import annotations

import pytest
import torch
from PySide6.QtGui import QAction, QKeySequence
from torch import nn

import peft  # noqa: F401,E402 - in the test extra: a missing extra fails here, never skips
import transformers  # noqa: E402

from workbench.core.model.opening import open_model  # noqa: E402
from workbench.ui import dialogs  # noqa: E402
from workbench.ui.dialogs import LoraDialog, LoraOptions  # noqa: E402

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")

SELF_ATTENTION = "bert.encoder.layer.0.attention.self"
PROJECTIONS = [f"{SELF_ATTENTION}.{n}" for n in ("query", "key", "value")]


def _bert() -> nn.Module:
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                  vocab_size=100, num_labels=2)
    return transformers.BertForSequenceClassification(cfg)


def _trigger_add_lora(win, name: str) -> QAction:
    tree = win.tree_widget
    assert tree.select_name(name)
    menu = tree.context_menu(tree.view.currentIndex())
    action = menu.findChild(QAction, "addLoraAction")
    assert action is not None and action.text() == "Add LoRA adapters…"
    if action.isEnabled():
        action.trigger()
    return action


def test_the_context_menu_adds_adapters_the_tree_shows_them_and_ctrl_z_removes_them(window, monkeypatch):
    win = window
    asked = []

    def answer(target, types, present, parent=None):
        asked.append((target, tuple(types), list(present)))
        return LoraOptions(r=4, alpha=8, dropout=0.0, types=("Linear",))

    monkeypatch.setattr(dialogs, "ask_lora", answer)
    model = _bert()
    win.session.set_model(model, source="tiny bert")
    total = win.tree_model.root.total_params
    assert win.tree_model.root.trainable_params == total
    base = {n: t.detach().clone() for n, t in model.state_dict().items()}

    _trigger_add_lora(win, SELF_ATTENTION)
    assert asked == [(SELF_ATTENTION, ("Linear", "Conv2d"), ["Linear"])]
    root = win.tree_model.root
    for path in PROJECTIONS:
        node = root.find(path)
        assert {c.short_name for c in node.children} >= {"base_layer", "lora_A", "lora_B"}
        assert root.find(f"{path}.lora_A.default").type_name == "Linear"
    adapters = 3 * 4 * (32 + 32)  # A (4, 32) and B (32, 4) per projection
    head = sum(p.numel() for p in model.classifier.parameters())  # the task head trains too (modules_to_save)
    assert root.trainable_params == adapters + head and root.total_params == total + adapters
    assert win.session.edits == [{"op": "add_lora", "paths": PROJECTIONS, "r": 4, "alpha": 8, "dropout": 0.0}]
    assert win.errors == []

    undo = win.undo_action
    assert undo.shortcut() == QKeySequence(QKeySequence.StandardKey.Undo) and undo.isEnabled()
    undo.trigger()  # Ctrl+Z
    root = win.tree_model.root
    assert all(type(model.get_submodule(p)) is nn.Linear for p in PROJECTIONS)
    assert root.find(f"{PROJECTIONS[0]}.lora_A") is None
    assert root.trainable_params == total and root.total_params == total
    assert win.session.edits == []
    assert all(torch.equal(t, base[n]) for n, t in model.state_dict().items())

    win.redo_action.trigger()
    assert win.tree_model.root.trainable_params == adapters + head
    assert win.session.edits[0]["op"] == "add_lora"


def test_a_cancelled_dialog_changes_nothing_and_an_adapted_layer_offers_no_second_set(window, monkeypatch):
    win = window
    answers = [None, LoraOptions(r=2, alpha=2, types=("Linear",), names=("query",))]
    monkeypatch.setattr(dialogs, "ask_lora", lambda *args: answers.pop(0))
    win.session.set_model(_bert(), source="tiny bert")
    _trigger_add_lora(win, SELF_ATTENTION)
    assert win.session.edits == [] and not win.undo_stack.canUndo()
    _trigger_add_lora(win, "bert.encoder")
    assert win.session.edits[0]["paths"] == ["bert.encoder.layer.0.attention.self.query",
                                             "bert.encoder.layer.1.attention.self.query"]
    assert not _trigger_add_lora(win, f"{PROJECTIONS[0]}.base_layer").isEnabled()
    assert not _trigger_add_lora(win, "bert.embeddings.LayerNorm").isEnabled()
    assert win.errors == []


def test_the_lora_dialog_offers_the_types_present_and_returns_the_numbers(qtbot):
    dialog = LoraDialog("layer1", ("Linear", "Conv2d"), ["Conv2d"])
    qtbot.addWidget(dialog)
    assert dialog.objectName() == "loraDialog"
    conv, linear = dialog.findChild(object, "loraTypeConv2d"), dialog.findChild(object, "loraTypeLinear")
    assert conv.isChecked() and conv.isEnabled() and not linear.isEnabled() and not linear.isChecked()
    dialog.findChild(object, "loraRankSpin").setValue(16)
    dialog.findChild(object, "loraAlphaSpin").setValue(32)
    dialog.findChild(object, "loraDropoutSpin").setValue(0.1)
    dialog.findChild(object, "loraNamesEdit").setText("conv1, conv2")
    assert dialog.options() is None  # not accepted yet
    dialog.accept()
    assert dialog.options() == LoraOptions(r=16, alpha=32.0, dropout=0.1, types=("Conv2d",), names=("conv1", "conv2"))
    conv.setChecked(False)
    assert not dialog.ok_button.isEnabled()  # nothing to adapt


def test_probes_follow_an_adapted_projection_and_its_adapter(window, qtbot, monkeypatch):
    win = window
    monkeypatch.setattr(dialogs, "ask_lora", lambda *args: LoraOptions(r=4, alpha=8, types=("Linear",)))
    win.session.set_model(_bert(), source="tiny bert")
    _trigger_add_lora(win, SELF_ATTENTION)
    probes = win.probes_panel
    assert probes.toggle_probe(PROJECTIONS[0]) and probes.toggle_probe(f"{PROJECTIONS[0]}.lora_B.default")
    with qtbot.waitSignal(probes.resultsShown, timeout=20_000):
        assert probes.run_probe_batch()
    qtbot.waitUntil(lambda: not probes.is_busy(), timeout=10_000)
    stats = probes.current_stats()
    assert stats is not None and stats.shape[-1] == 32
    assert win.errors == []


def test_save_merges_keeps_or_saves_the_adapters_alone_and_a_kept_file_reopens_with_them(window, monkeypatch,
                                                                                        tmp_path):
    from workbench.core.model import lora as core_lora

    win = window
    _bert().save_pretrained(tmp_path / "bert")  # opened from its folder: the checkpoint then names its architecture
    assert win.open_path(tmp_path / "bert")
    monkeypatch.setattr(dialogs, "ask_lora", lambda *args: dialogs.LoraOptions(r=4, alpha=8, dropout=0.0,
                                                                               types=("Linear",), names=()))
    _trigger_add_lora(win, SELF_ATTENTION)
    assert core_lora.lora_paths(win.model)

    win.prompts.answers["lora_save"] = "merge"
    assert win.save_checkpoint(tmp_path / "merged.pt")
    merged = torch.load(tmp_path / "merged.pt", weights_only=True)
    assert not any("lora_" in k for k in merged["model_state_dict"]) and not merged.get("edits")
    assert core_lora.lora_paths(win.model)  # the live model keeps its adapters

    win.prompts.answers["lora_save"] = "keep"
    assert win.save_checkpoint(tmp_path / "kept.pt")
    reopened = open_model(tmp_path / "kept.pt")  # the file's add_lora edit is replayed before its weights load
    assert reopened.report.ok and sorted(core_lora.lora_paths(reopened.model)) == sorted(PROJECTIONS)

    win.prompts.answers["lora_save"] = "adapters"
    assert win.save_checkpoint(tmp_path / "adapters.pt")
    assert {p.name for p in (tmp_path / "adapters").iterdir()} >= {"adapter_model.safetensors",
                                                                   "adapter_config.json"}
    assert [a[0] for a in win.prompts.asked].count("lora_save") == 3
