"""Run folders to the system trash and back (``workbench.core.train.runs.trash``)."""

from __future__ import annotations

import time

import pytest

from tests.core.train.damaged_runs import isolated_trash
from workbench.core.run_folder.processes import RunIsTraining
from workbench.core.train.runs.folder import write_status
from workbench.core.train.runs.trash import TrashedRun, restore_run, trash_run


@pytest.fixture
def run_folder(tmp_path, monkeypatch):
    isolated_trash(monkeypatch, tmp_path)
    folder = tmp_path / "runs" / "exp"
    folder.mkdir(parents=True)
    (folder / "metrics.csv").write_text("epoch,step\n0,1\n")
    return folder


def test_a_trashed_run_is_found_in_the_trash_and_restored(run_folder, tmp_path):
    trashed = trash_run(run_folder)
    assert not run_folder.exists() and trashed.original == run_folder.absolute()
    assert trashed.item is not None and (trashed.item / "metrics.csv").read_text() == "epoch,step\n0,1\n"
    assert trashed.info is not None and trashed.info.exists()
    assert restore_run(trashed) == run_folder.absolute()
    assert (run_folder / "metrics.csv").exists() and not trashed.info.exists()


def test_restore_overwrites_nothing_and_says_when_the_trash_was_emptied(run_folder):
    trashed = trash_run(run_folder)
    run_folder.mkdir()
    with pytest.raises(FileExistsError):
        restore_run(trashed)
    with pytest.raises(FileNotFoundError, match="no longer in the trash"):
        restore_run(TrashedRun(trashed.original, None, None))


def test_a_missing_folder_or_one_that_is_training_is_not_trashed(run_folder):
    with pytest.raises(FileNotFoundError):
        trash_run(run_folder.parent / "gone")
    write_status(run_folder, None, time.time())  # this very process trains there
    with pytest.raises(RunIsTraining, match="stop the run before you delete it"):
        trash_run(run_folder)
    assert run_folder.exists()
