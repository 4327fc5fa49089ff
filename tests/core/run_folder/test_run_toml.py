"""``run.toml`` read whatever is on disk (``workbench.core.run_folder.run_toml``)."""

from __future__ import annotations

import pytest

from workbench.core.run_folder.reading import RunFileError
from workbench.core.run_folder.run_toml import read_run_info


@pytest.mark.parametrize("text, match", [
    ("model = 3\n", r"model is an integer, not a table \(\[model\]\)"),
    ("[model]\narch = 3\n", r"\[model\] arch is an integer, not a string"),
    ('data = "digits"\n', "data is a string, not a table"),
    ('epochs = "ten"\n', "epochs is a string, not an integer"),
    ("epochs = -1\n", "epochs is -1, not a count"),
    ("[model\n", "not TOML"),
])


def test_run_toml_of_the_wrong_shape_is_said(tmp_path, text, match):
    (tmp_path / "run.toml").write_text(text)
    with pytest.raises(RunFileError, match=match):
        read_run_info(tmp_path)


def test_a_good_run_toml_gives_its_model_dataset_and_epochs(tmp_path):
    (tmp_path / "run.toml").write_text('epochs = 7\n[model]\narch = "mlp"\n[data]\ndataset = "digits"\n')
    info = read_run_info(tmp_path)
    assert (info.model, info.dataset, info.epochs) == ("mlp", "digits", 7)
