"""The window's side of runs on a host: Training › Run on HOST then Start; the Runs dock's "On hosts" list, Pull.

Against the session's real OpenSSH server on 127.0.0.1 (tests/hosts/sshd.py), reached as the ssh config alias the
other remote tests use (``$WORKBENCH_SSH_CONFIG``); the window is the real one on the demo model.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest
import torch

from tests.hosts.sshd import ALIAS, UNKNOWN_ALIAS
from tests.remote.polling import POLL_S
from workbench import remote
from workbench.ui.qsettings import make_settings
from workbench.ui.remote_hosts import HostEntry, load_hosts
from workbench.ui.train.remote_target import ADD_HOST, RunTarget

pytestmark = [pytest.mark.remote, pytest.mark.usefixtures("no_dangling_qthreads")]

#: Seconds a remote state is waited for (a one-epoch digits run ends in a few seconds on 2 busy cores).
WAIT_S = 90.0


@pytest.fixture(autouse=True)
def _gc_on_the_gui_thread(qapp):
    """As tests/ui and the application: the cyclic GC runs only on the GUI thread."""
    from workbench.ui.threading import collect_garbage_on_gui_thread

    collect_garbage_on_gui_thread()


@pytest.fixture
def host_config(ssh_host, monkeypatch):
    """The window reaches the test host through the test ssh config, as ``workbench submit`` does."""
    monkeypatch.setenv("WORKBENCH_SSH_CONFIG", str(ssh_host.config))
    return ssh_host


def _run_on(panel, host: str, remote_dir: str) -> RunTarget:
    """Training › Run options › Run on › Add host… HOST, its runs folder ``remote_dir``, as a user does."""
    target = panel.run_options.run_target
    target.ask_host = lambda: host
    target.combo.activated.emit(target.combo.findData(ADD_HOST))
    target.remote_dir_edit.setText(remote_dir)
    target.remote_dir_edit.editingFinished.emit()
    return target


def _folders(path: Path) -> set:
    return set(path.iterdir()) if path.is_dir() else set()


def _wait_state(qtbot, view, name: str, states: tuple) -> str:
    """Refresh the "On hosts" list (its worker thread) until ``name``'s state is one of ``states``."""
    deadline = time.monotonic() + WAIT_S
    while (state := view.state_of(ALIAS, name)) not in states:
        if time.monotonic() > deadline:
            pytest.fail(f"not within {WAIT_S:.0f} s: {name} {' or '.join(states)} (listed: {state})")
        with qtbot.waitSignal(view.listed, timeout=30_000):
            view.refresh()
        qtbot.wait(int(POLL_S * 1000))  # the host's state is read over ssh: asked again at a fixed pace
    return state


def test_run_on_a_host_from_the_window_lists_it_and_pull_makes_it_a_local_run(main_window, host_config, remote_dir,
                                                                              tmp_path, qtbot):
    win, panel = main_window
    panel.settings.epochs_spin.setValue(1)
    target = _run_on(panel, ALIAS, remote_dir)
    assert target.combo.currentText() == ALIAS and target.host_box.isVisibleTo(target)
    assert not target.slurm_box.isVisibleTo(target)
    submitted = []
    panel.remoteSubmitted.connect(submitted.append)
    weights = {k: v.clone() for k, v in win.session.model.state_dict().items()}

    assert panel.start() and not win.prompts.errors, win.prompts.errors
    [run] = submitted
    assert not panel.is_running() and not (tmp_path / "run").exists()  # nothing trains here
    assert run.id in [r.id for r in remote.runs(ALIAS, remote_dir=remote_dir)]
    # the host starts from the window's weights, as a local run's init.pt records them
    sent = torch.load(host_config.home / remote_dir / run.id / "inputs" / "init.pt", weights_only=True)
    assert all(torch.equal(sent["model_state_dict"][k], v) for k, v in weights.items())
    view = win.runs_panel.remote
    assert view.isVisibleTo(win.runs_panel) and view.state_of(ALIAS, run.id) is not None

    log = host_config.home / remote_dir / run.id / "train.log"
    assert _wait_state(qtbot, view, run.id, ("completed", "crashed")) == "completed", log.read_text()[-2000:]
    row = next(r for r, (rr, _s) in enumerate(view.table_model.rows) if rr.id == run.id)
    assert [view.table_model.index(row, c).data() for c in range(3)] == [ALIAS, run.id, "completed"]

    attached = []
    assert view.attach_button.isVisibleTo(view)  # the window gave the view its way to attach
    view.set_attach(None)
    assert not view.attach_button.isVisibleTo(view)
    view.set_attach(attached.append)  # a stand-in: the run has ended, nothing listens
    view.select(ALIAS, run.id)
    view.attach_button.click()
    assert attached == [run]

    local_root = tmp_path / "local runs"
    win.runs_panel.root_edit.setText(str(local_root))
    view.select(ALIAS, run.id)
    assert view.pull_button.isEnabled()
    view.pull_button.click()
    pulled = local_root / run.id
    assert {"metrics.csv", "last.pt", "status.json", "run.toml"} <= {p.name for p in pulled.iterdir()}
    runs_panel = win.runs_panel
    assert [r.name for r in runs_panel.selected_runs()] == [run.id]  # listed as a local run, selected
    assert runs_panel.selected_runs()[0].state == "finished" and run.id in runs_panel.curves  # the overlay draws it


def test_a_host_that_refuses_is_one_line_and_leaves_no_run_folder(main_window, host_config, remote_dir, tmp_path):
    win, panel = main_window
    _run_on(panel, UNKNOWN_ALIAS, remote_dir)
    on_host = host_config.home / remote_dir
    before, staged = _folders(on_host), set(Path(tempfile.gettempdir()).glob("workbench-submit-*"))
    assert not panel.start()
    [error] = win.prompts.errors
    assert "\n" not in error and error.startswith(f"Run on {UNKNOWN_ALIAS}: ")
    assert "Host key verification failed" in error
    assert _folders(on_host) == before and not (tmp_path / "run").exists()
    assert set(Path(tempfile.gettempdir()).glob("workbench-submit-*")) == staged  # nothing left here either


def test_hosts_are_remembered_with_their_slurm_fields(qtbot):
    target = RunTarget(make_settings())
    qtbot.addWidget(target)
    assert [target.combo.itemText(i) for i in range(target.combo.count())] == ["This machine", "Add host…"]
    assert target.entry() is None and not target.host_box.isVisibleTo(target)
    assert not target.add_host("gpu box") and "not an ssh destination" in target.note.text()
    assert target.add_host("me@login") and target.entry() == HostEntry("me@login")
    target.slurm_check.setChecked(True)
    assert target.slurm_box.isVisibleTo(target)
    target.nodes_spin.setValue(2)
    target.gpus_spin.setValue(4)
    target.partition_edit.setText("gpu")
    target.partition_edit.editingFinished.emit()
    target.time_edit.setText("01:00:00")
    target.time_edit.editingFinished.emit()

    again = RunTarget(make_settings())  # the next window
    qtbot.addWidget(again)
    again.choose("me@login")
    assert again.combo.currentText() == "me@login (SLURM)" and again.slurm_box.isVisibleTo(again)
    assert again.entry().submit_options() == {"remote_dir": "~/workbench-runs", "slurm": True, "nodes": 2,
                                              "gpus_per_node": 4, "partition": "gpu", "time": "01:00:00"}
    again.forget_host()
    assert again.entry() is None and load_hosts(make_settings()) == []
