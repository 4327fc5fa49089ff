"""workbench.attach in this process (the loop on a thread), a client attached: the NaN trace of a script's
batch, the cost of a step with no window, a group's own LR, and what a read-only watcher may do."""

from __future__ import annotations

import math
import threading

import pytest
import torch
import torchvision
from torch import nn

import workbench
from tests.attach_scripts.common import until
from workbench.core.train.events import CommandApplied, NonFinite

pytestmark = pytest.mark.timeout(120)


def test_a_nonfinite_loss_is_traced_to_the_module_that_made_it(tmp_path):
    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    wb = workbench.attach(model, optimizer, run_dir=tmp_path / "run")
    run = workbench.connect(wb.address, wb.token)
    try:
        for step in range(3):
            if step == 2:
                with torch.no_grad():
                    model.layer2[0].conv1.weight.fill_(math.nan)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            if torch.isfinite(loss):  # the loop skips a non-finite step, as AMP's GradScaler does
                optimizer.step()
            optimizer.zero_grad()
            wb.step(loss, batch=(x, y))
        event = until(run, NonFinite)
        assert event.step == 3 and math.isnan(event.loss)
        assert event.trace["module"] == "layer2.0.conv1" and event.trace["phase"] == "forward"
    finally:
        wb.close()
        run.close()


def test_set_lr_of_one_param_group_leaves_the_others(tmp_path):
    model = torchvision.models.resnet18(num_classes=10)
    head = list(model.fc.parameters())
    body = [p for n, p in model.named_parameters() if not n.startswith("fc.")]
    optimizer = torch.optim.SGD([{"params": body, "lr": 0.01}, {"params": head, "lr": 0.1}])
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1000)
    wb = workbench.attach(model, optimizer, scheduler=scheduler, run_dir=tmp_path / "run")
    run = workbench.connect(wb.address, wb.token)
    stop = threading.Event()

    def loop():
        while not stop.is_set() and not wb.should_stop:
            wb.step(1.0)

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        run.set_lr(0.5, group=1)
        assert until(run, CommandApplied).command.group == 1
        run.set_lr(0.002)  # every group, in proportion to the first's
        until(run, CommandApplied)
        run.stop()
        thread.join(10)
        assert not thread.is_alive()  # should_stop ended the loop
    finally:
        stop.set()
        thread.join(10)
        wb.close()
        run.close()
    assert [g["lr"] for g in optimizer.param_groups] == [pytest.approx(0.002), pytest.approx(0.1)]
    assert scheduler.base_lrs == [pytest.approx(0.002), pytest.approx(0.1)]


def test_a_watcher_cannot_steer_and_an_unknown_command_is_refused(tmp_path):
    model = torchvision.models.resnet18(num_classes=10)
    wb = workbench.attach(model, torch.optim.SGD(model.parameters(), lr=0.1), run_dir=tmp_path / "run")
    steering = workbench.connect(wb.address, wb.token)
    watcher = workbench.connect(wb.address, wb.token)
    try:
        assert steering.steering and not watcher.steering
        assert watcher.steered_elsewhere and not steering.steered_elsewhere
        cid = watcher._command("freeze", path="layer1")
        reply = watcher.wait_ack(cid)
        assert reply is not None and not reply["ok"] and "read-only" in reply["error"]
        cid = steering._command("format_disk")
        reply = steering.wait_ack(cid)
        assert reply is not None and not reply["ok"] and "unknown command" in reply["error"]
        wb.step(1.0)
        assert all(p.requires_grad for p in model.parameters())
    finally:
        wb.close()
        steering.close()
        watcher.close()


def test_a_script_that_raises_ends_its_run_as_an_error(tmp_path):
    import json
    import subprocess
    import sys

    code = ("import torch, torchvision, workbench\n"
            "m = torchvision.models.resnet18(num_classes=10)\n"
            f"wb = workbench.attach(m, torch.optim.SGD(m.parameters(), lr=0.1), run_dir={str(tmp_path / 'run')!r})\n"
            "for i in range(5):\n    wb.step(1.0)\n"
            "raise ValueError('the data ran out')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "the data ran out" in done.stderr
    status = json.loads((tmp_path / "run" / "status.json").read_text())
    assert status["state"] == "crashed" and status["reason"] == "error" and status["attached"] is True


def test_bad_probe_settings_are_refused_and_an_early_probe_choice_is_kept(tmp_path):
    from workbench.core.probe.callback import ProbeCallback

    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    wb = workbench.attach(model, optimizer, run_dir=tmp_path / "run")
    reports: list = []
    window_cb = ProbeCallback(reports.extend, every=1, flush_ms=0)  # each report sent at its step
    run = workbench.connect(wb.address, wb.token, callbacks=[window_cb])
    window_cb.set_probed(["layer3"])  # at once, before the script's next step installed the callback
    x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    try:
        for bad in ({"every": 0}, {"budget": "lots"}, {"thresholds": {"a": 1}}):
            cid = run._command("callbacks", callbacks=[{"kind": "probe", "settings": bad}])
            reply = run.wait_ack(cid)
            assert reply is not None and not reply["ok"] and "probe settings refused" in reply["error"]
        for _ in range(3):
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            wb.step(loss)  # none of the refused settings reaches the step
        for event in run.events(timeout=10):  # the window's sink gets the reports, not events()
            if any("layer3" in r.activations for r in reports):
                break
        assert any("layer3" in r.activations for r in reports)
    finally:
        wb.close()
        run.close()


def test_the_history_keeps_the_whole_run_evenly_and_replays_in_chunks():
    import numpy as np

    from workbench.core.attach.server import History
    from workbench.core.train.events import FitStarted, Metrics, Paused

    history = History(max_rows=1000)
    history.add(FitStarted({"epoch": 0}))
    for start in range(1, 100_001, 100):
        steps = np.arange(start, start + 100, dtype=np.float64)
        history.add(Metrics({"step": steps, "loss": 1.0 / steps}))
    history.add(Paused(100_000))
    steps = history.metrics()["step"]
    assert len(steps) <= 1000 and steps[0] == 1.0  # bounded, and the run's beginning is kept
    first_tenth = np.count_nonzero(steps <= 10_000)
    assert 0.05 * len(steps) <= first_tenth <= 0.15 * len(steps)  # thinned evenly, not the old rows first
    replay = history.replay(chunk=300)
    assert isinstance(replay[0], FitStarted) and isinstance(replay[-1], Paused)
    chunks = [e for e in replay if isinstance(e, Metrics)]
    assert all(len(c.values["step"]) <= 300 for c in chunks)
    assert np.array_equal(np.concatenate([c.values["step"] for c in chunks]), steps)


def test_a_bad_probe_call_is_refused_and_a_failing_probe_never_ends_the_step(tmp_path):
    from workbench.core.probe.callback import ProbeCallback

    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    wb = workbench.attach(model, optimizer, run_dir=tmp_path / "run")
    run = workbench.connect(wb.address, wb.token, callbacks=[ProbeCallback(lambda reports: None, every=1)])
    x, y = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    try:
        for method, args in (("set_weight_histograms", [[[1]]]), ("set_probed", [["a", 2]]),
                             ("set_cadence", [0]), ("set_cadence", [None, float("nan")]), ("__reduce__", [])):
            reply = run.wait_ack(run._command("callback", index=0, method=method, args=args))
            assert reply is not None and not reply["ok"], (method, reply)
        for _ in range(3):
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            wb.step(loss)
        wb._probes[0].on_step_end = None  # a probe that breaks: the script's next step goes on without it
        wb.step(1.0)
        assert wb._probes == []
    finally:
        wb.close()
        run.close()


def test_a_structure_torch_refuses_is_a_skeleton_error():
    from workbench.core.model.skeleton import SkeletonError, build_skeleton

    for bad in ({"modules": [["", "M"], ["training", "M"]]},  # a name nn.Module reserves
                {"modules": [["", "M"], ["a", "M"], ["a", "M"]]},  # listed twice
                {"modules": [["", "M"]], "params": [["w", [2**40 - 1, 2**40 - 1], "float32", True]]}):
        with pytest.raises(SkeletonError):
            build_skeleton(bad)
