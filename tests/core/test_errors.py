"""The project's exception types (workbench.core.errors): their messages name the file and say what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.core.errors import (
    ArchitectureError,
    CheckpointCorrupt,
    CheckpointError,
    ContributionError,
    DataError,
    StepError,
    TrainingError,
    TrustRequired,
    WorkbenchError,
)


def test_a_checkpoint_error_puts_the_file_in_front_of_its_message():
    err = CheckpointError("not a checkpoint", "runs/a/last.pt")
    assert str(err) == f"{Path('runs/a/last.pt')}: not a checkpoint"
    assert err.path == Path("runs/a/last.pt")
    bare = CheckpointError("no file given")
    assert str(bare) == "no file given" and bare.path is None


@pytest.mark.parametrize("kind, globals_, middle", [
    ("pickle", ["mymod.Net", "collections.OrderedDict"],
     "needs these globals that weights-only loading refuses: mymod.Net, collections.OrderedDict"),
    ("pickle", [], "needs these globals that weights-only loading refuses: (unknown)"),
    ("torchscript", [], "is a TorchScript archive; loading it runs code stored in the file"),
    ("code", ["nets.py:build"], "names code that would be imported and called: nets.py:build"),
])
def test_trust_required_says_why_and_how_to_trust(tmp_path, kind, globals_, middle):
    path = tmp_path / "model.pt"
    err = TrustRequired(path, globals_, kind)
    assert str(err) == f"{path}: {middle}. Load it only if you trust its source (--trust on the command line)."
    assert (err.kind, err.globals, err.path) == (kind, globals_, path)
    assert err.globals is not globals_  # a copy: the caller's list may change


def test_a_corrupt_checkpoint_names_the_intact_one_or_says_there_is_none(tmp_path):
    err = CheckpointCorrupt(tmp_path / "last.pt", tmp_path / "epoch_003.pt", detail="2 tensors differ")
    assert str(err) == (f"{tmp_path / 'last.pt'}: is corrupt (2 tensors differ); "
                        "epoch_003.pt is intact: open or resume from it instead.")
    assert err.intact == tmp_path / "epoch_003.pt" and err.detail == "2 tensors differ"
    none = CheckpointCorrupt(str(tmp_path / "last.pt"))
    assert str(none).endswith("is corrupt (digest mismatch); no intact checkpoint of this run was found.")
    assert none.intact is None


def test_an_architecture_error_keeps_its_load_report():
    report = object()
    err = ArchitectureError("3 keys missing", report)
    assert str(err) == "3 keys missing" and err.report is report
    assert ArchitectureError("no architecture").report is None


def test_every_error_a_user_can_cause_is_a_workbench_error():
    for kind in (CheckpointError, TrustRequired, CheckpointCorrupt, ArchitectureError, ContributionError, DataError,
                 TrainingError, StepError):
        assert issubclass(kind, WorkbenchError)
    assert issubclass(TrustRequired, CheckpointError) and issubclass(CheckpointCorrupt, CheckpointError)
    with pytest.raises(ValueError, match="batch holds a list"):  # a step error is caught as a bad value too
        raise StepError("batch holds a list")
    with pytest.raises(TrainingError):
        raise StepError("no loss")
