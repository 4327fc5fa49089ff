"""A full disk or a failed write never ends an attached script's training (``workbench.core.attach.notice``)."""

from __future__ import annotations

import errno
import logging

import pytest
import torch
from torch import nn

import workbench
from tests.attach_scripts.common import until
from tests.disk import fill_disk as _fill
from workbench.core.attach.notice import Notice, WriteReporter
from workbench.core.train.trainer.edit_log import EditLog
from workbench.core.attach.schema import SchemaError, check_event, check_steering
from workbench.core.train.events import CommandApplied
from workbench.core.train.trainer.edit_log import EDITS_FILE, read_edits

pytestmark = pytest.mark.timeout(60)


def test_a_failing_file_is_said_once_and_its_recovery_once(tmp_path):
    told: list[Notice] = []
    reporter = WriteReporter(told.append)
    full = OSError(errno.ENOSPC, "No space left on device")
    reporter.failed(tmp_path / "steps.csv", full, "rows not written")
    reporter.failed(tmp_path / "steps.csv", full, "rows not written")  # still failing: not said again
    assert [n.kind for n in told] == ["write_failed"] and told[0].file == str(tmp_path / "steps.csv")
    assert told[0].text.startswith("steps.csv rows not written: No space left on device")
    assert reporter.problems() == [told[0].text]
    reporter.ok(tmp_path / "steps.csv")
    reporter.ok(tmp_path / "steps.csv")
    assert [n.kind for n in told] == ["write_failed", "write_ok"] and reporter.problems() == []


def test_an_edit_log_that_cannot_be_written_reports_instead_of_raising(tmp_path):
    told: list[Notice] = []
    log = EditLog(tmp_path / "gone", WriteReporter(told.append))  # its folder does not exist
    log.write(3, {"op": "pause"})
    assert told[0].kind == "write_failed" and "the pause at step 3 is not recorded" in told[0].text
    (tmp_path / "gone").mkdir()
    log.write(4, {"op": "resume"})  # the next write tries again
    assert told[-1].kind == "write_ok" and read_edits(tmp_path / "gone" / EDITS_FILE) == [{"step": 4, "op": "resume"}]


def test_a_full_disk_never_ends_an_attached_scripts_training(small_disk, caplog):
    run_dir = small_disk / "run"
    run_dir.mkdir()
    earlier = b'{"step": 0, "op": "pause"}\n' * 150  # 4,050 bytes: 46 left in its page, fewer than a line
    (run_dir / EDITS_FILE).write_bytes(earlier)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    att = workbench.attach(model, torch.optim.SGD(model.parameters(), lr=0.1), run_dir=run_dir, name="full")
    run = workbench.connect(att.address, att.token)
    caplog.set_level(logging.WARNING, "workbench.attach")
    try:
        att.step(1.0)
        att.flush()  # steps.csv begun while there is room
        filler = _fill(small_disk)
        assert run.wait_ack(run.freeze("0"), timeout=10)["ok"]
        att.step(1.0)  # the freeze applies; its line in edits.jsonl cannot be written whole
        failed = until(run, Notice, lambda e: e.kind == "write_failed" and e.file.endswith(EDITS_FILE))
        assert "No space left on device" in failed.text and "set_trainable at step 2" in failed.text
        assert until(run, CommandApplied).command.changed == ["0.weight", "0.bias"]
        assert not model[0].weight.requires_grad
        assert (run_dir / EDITS_FILE).read_bytes() == earlier  # no half line left behind
        for _ in range(120):  # more rows than the last page of steps.csv holds
            att.step(0.5)
        att.flush()
        assert until(run, Notice, lambda e: e.file.endswith("steps.csv")).kind == "write_failed"
        att.epoch_end(val_loss=0.4)
        assert until(run, Notice, lambda e: e.file.endswith("metrics.csv")).kind == "write_failed"
        assert run.wait_ack(run.save_now(), timeout=10)["ok"]
        att.step(1.0)
        saved = until(run, Notice, lambda e: e.kind == "save_failed")
        assert saved.file == str(run_dir / "last.pt") and saved.text.startswith("Save now failed:")
        assert not (run_dir / "last.pt").exists()
        late = workbench.connect(att.address, att.token, steer=False)  # a window attaching now is told
        assert any(EDITS_FILE in p for p in late.info["problems"])
        late.close()

        filler.unlink()  # room again: each file's next write goes through, and the window hears it
        assert run.wait_ack(run.set_lr(0.01), timeout=10)["ok"]
        att.step(1.0)
        assert until(run, Notice, lambda e: e.file.endswith(EDITS_FILE)).kind == "write_ok"
        att.flush()
        # steps.csv: a failed batch of rows is cut back whole, so a later small batch may fit in the page the
        # file already holds (its write_ok can come before the room does): whole rows, through the last step
        rows = (run_dir / "steps.csv").read_text().splitlines()[1:]
        assert rows and rows[-1].split(",")[0] == "124" and all(r.count(",") == rows[0].count(",") for r in rows)
        assert read_edits(run_dir / EDITS_FILE)[-1] == {"step": 124, "op": "set_lr", "lr": 0.01}
        att.epoch_end(val_loss=0.3)  # the epoch row that failed is written with this one
        assert until(run, Notice, lambda e: e.file.endswith("metrics.csv")).kind == "write_ok"
        assert [r.split(",")[0] for r in (run_dir / "metrics.csv").read_text().splitlines()[1:]] == ["0", "1"]
        assert att.step_count == 124 and att.writes.problems() == []
    finally:
        run.close()
        att.close()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "edits.jsonl not written (the set_trainable at step 2 is not recorded): No space left" in logged
    assert "SaveNow not applied" in logged and "steps.csv rows not written: No space left" in logged


def test_a_window_checks_notices_and_steering_changes_it_receives():
    check_event(Notice("write_failed", "steps.csv rows not written: No space left on device", "/r/steps.csv"))
    with pytest.raises(SchemaError, match="Notice.kind: 'run_this' is not a notice Workbench knows"):
        check_event(Notice("run_this", "x"))
    with pytest.raises(SchemaError, match="Notice.text: a text of"):
        check_event(Notice("write_failed", "x" * 200_000))
    check_steering({"type": "steering", "steering": False, "reason": "taken"})
    for bad in ({"type": "steering", "steering": "no"}, {"type": "steering", "steering": False, "reason": 3}):
        with pytest.raises(SchemaError):
            check_steering(bad)
