"""edits.jsonl is validated completely before a replayed run starts: each op, its fields and their types."""

from __future__ import annotations

import json

import pytest

from workbench import cli
from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig
from workbench.core.train.trainer.edit_log import EDITS_FILE, read_edits


def _write(path, *entries):
    path.write_text("".join((e if isinstance(e, str) else json.dumps(e)) + "\n" for e in entries), encoding="utf-8")
    return path


GOOD = ({"step": 0, "op": "set_trainable", "names": ["fc.weight"], "flag": False},
        {"step": 3, "op": "set_lr", "lr": 0.01}, {"step": 3, "op": "pause"}, {"step": 4, "op": "save_now"})


def test_good_edits_read_back_in_order(tmp_path):
    assert read_edits(_write(tmp_path / EDITS_FILE, *GOOD)) == list(GOOD)


@pytest.mark.parametrize("bad, words", [
    ({"step": 5, "op": "set_lr"}, "lacks its field 'lr'"),
    ({"step": 5, "op": "set_lr", "lr": "fast"}, "'lr' must be a positive number"),
    ({"step": 5, "op": "set_lr", "lr": -1.0}, "'lr' must be a positive number"),
    ({"step": 5, "op": "set_trainable", "names": "fc", "flag": True}, "'names' must be a list"),
    ({"step": 5, "op": "set_trainable", "names": ["fc.weight"], "flag": 1}, "'flag' must be true or false"),
    ({"step": True, "op": "pause"}, "'step' must be a whole number"),
    ({"step": -1, "op": "pause"}, "'step' must be a whole number"),
    ({"step": 1, "op": "format_disk"}, "unknown op 'format_disk'"),
    ("[1, 2]", "not a JSON object"),
    ("{not json", "not JSON"),
    ("[" * 100_000, "nested too deeply"),
])
def test_a_bad_line_is_named_with_what_is_wrong(tmp_path, bad, words):
    path = _write(tmp_path / EDITS_FILE, GOOD[0], bad)
    with pytest.raises(ValueError) as info:
        read_edits(path)
    assert f"{path}, line 2: " in str(info.value) and words in str(info.value)


def test_not_utf8_names_the_file(tmp_path):
    path = tmp_path / EDITS_FILE
    path.write_bytes(b'{"step": 0, "op": "pause"}\n\xff\n')
    with pytest.raises(ValueError, match="not UTF-8"):
        read_edits(path)


def test_workbench_train_refuses_a_bad_edit_before_the_run_starts(tmp_path, capsys):
    cfg = TrainConfig(data=DataConfig(batch_size=128), epochs=1, run_dir=str(tmp_path / "out"), tensorboard=False,
                      model=ModelConfig(arch="digits_cnn"))
    cfg.to_toml(tmp_path / "run.toml")
    _write(tmp_path / EDITS_FILE, {"step": 2, "op": "set_lr"})
    assert cli.main(["train", str(tmp_path / "run.toml")]) == 1
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1].startswith("error: ") and "line 1" in out and "'lr'" in out
    assert not (tmp_path / "out").exists()  # nothing started
