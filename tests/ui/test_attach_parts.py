"""The two attach dialogs say a script's age and offer the take-over the same way (workbench.ui.attach_parts)."""

from __future__ import annotations

import os
import time

from workbench.core.attach.discovery import write_discovery
from workbench.ui.attach_dialog import AttachDialog
from workbench.ui.attach_parts import TAKE_OVER_TEXT, started_ago
from workbench.ui.remote_attach_dialog import RemoteAttachDialog


def test_started_ago_says_seconds_then_whole_minutes():
    now = 1_800_000_000.0
    assert started_ago(now - 40, now) == "started 40 s ago"
    assert started_ago(now - 59.4, now) == "started 59 s ago"  # below a minute: seconds, rounded
    assert started_ago(now - 59.6, now) == "started 1 min ago"  # never "60 s"
    assert started_ago(now - 60, now) == "started 1 min ago"
    assert started_ago(now - 12 * 60 - 20, now) == "started 12 min ago"
    assert started_ago(now + 30, now) == "started 0 s ago"  # a clock ahead of this one
    assert started_ago(None, now) == started_ago(0.0, now) == "start time unknown"  # never a made-up age
    assert started_ago(int(now) - 5, now) == "started 5 s ago"


def test_the_local_dialog_lists_a_waiting_script_s_age_and_both_offer_the_same_take_over(qtbot):
    info = {"address": "127.0.0.1:45678", "token": "t" * 32, "pid": os.getpid(), "port": 45678,
            "name": "ages", "model": "Sequential", "run_dir": "/tmp/ages/run", "started": time.time() - 125}
    path = write_discovery(info)  # a real discovery file of a live process (this one)
    try:
        local = AttachDialog()
        qtbot.addWidget(local)
        assert local.list.count() == 1
        assert local.list.item(0).text().endswith("·  127.0.0.1:45678  ·  started 2 min ago")
    finally:
        os.unlink(path)
    remote = RemoteAttachDialog()
    qtbot.addWidget(remote)
    for dialog in (local, remote):
        assert (dialog.take.objectName(), dialog.take.text()) == ("takeCheck", TAKE_OVER_TEXT)
        assert not dialog.take.isChecked()
    local.take.setChecked(True)
    assert local.target() == ("127.0.0.1:45678", "t" * 32, "take")
