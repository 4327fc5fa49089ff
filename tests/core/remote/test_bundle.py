"""A run file made ready for a host: what it names travels under relative names; a missing path is refused."""

from __future__ import annotations

import pytest

from workbench.core.remote.bundle import bundle, stage
from workbench.core.remote.ssh import RemoteError
from workbench.core.train.config import TrainConfig


def test_weights_data_and_code_travel_under_relative_names(tmp_path):
    (tmp_path / "init.pt").write_bytes(b"weights")
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    (tmp_path / "my_task.py").write_text("def step(model, batch):\n    return 0\n")
    (tmp_path / "edits.jsonl").write_text("")
    run = tmp_path / "run.toml"
    run.write_text('run_dir = "/home/me/runs/x"\n[model]\narch = "digits_cnn"\ninit = "init.pt"\n'
                   '[data]\ndataset = "csv"\nroot = "table.csv"\ntarget = "b"\n'
                   '[task]\nstep = "my_task.py:step"\nloss = "my_task.py:step"\n'
                   f'files = {{"{tmp_path}/my_task.py" = "abc"}}\n')
    b = bundle(run)
    assert b.files == {"inputs/init.pt": tmp_path / "init.pt", "inputs/table.csv": tmp_path / "table.csv",
                       "code/my_task.py": tmp_path / "my_task.py", "edits.jsonl": tmp_path / "edits.jsonl"}
    c = b.config
    assert (c.run_dir, c.model.init, c.data.root) == ("run", "inputs/init.pt", "inputs/table.csv")
    assert c.task.step == c.task.loss == "code/my_task.py:step" and c.task.files == {}
    out = stage(b, tmp_path / "stage")
    assert (out / "inputs" / "init.pt").read_bytes() == b"weights"  # a link to the file itself
    assert TrainConfig.from_toml(out / "run.toml").model.init == "inputs/init.pt"


def test_same_names_from_two_folders_do_not_collide(tmp_path):
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "f.py").write_text("def g():\n    pass\n")
    run = tmp_path / "run.toml"
    run.write_text('[task]\nstep = "a/f.py:g"\nvalidation_step = "b/f.py:g"\n')
    c = bundle(run).config
    assert (c.task.step, c.task.validation_step) == ("code/f.py:g", "code/2-f.py:g")


def test_a_path_this_machine_lacks_is_refused_naming_the_key(tmp_path):
    run = tmp_path / "run.toml"
    run.write_text('[model]\narch = "digits_cnn"\ninit = "/nowhere/init.pt"\n')
    with pytest.raises(RemoteError, match=r"run.toml: \[model\] init = '/nowhere/init.pt' is not on this machine"):
        bundle(run)


def test_built_in_data_carries_nothing_and_a_missing_run_file_is_said(tmp_path):
    run = tmp_path / "run.toml"
    run.write_text('[data]\ndataset = "digits"\nroot = "/ignored"\n')
    assert bundle(run).files == {}
    with pytest.raises(RemoteError, match="missing.toml: file not found"):
        bundle(tmp_path / "missing.toml")
