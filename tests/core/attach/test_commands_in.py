"""A window's commands, checked once for scripts and headless runs (:mod:`workbench.core.attach.commands_in`)."""

from __future__ import annotations

import math

import pytest

from workbench.core.attach.commands_in import WindowCommand, read_command, steer_control
from workbench.core.train.trainer.commands import SampleNow, SaveNow, SetLR, SetTrainable
from workbench.core.train.trainer.control import RunControl


@pytest.mark.parametrize("msg,steering,problem", [
    ({"op": "explode"}, True, "unknown command 'explode'"),
    ({"op": "freeze", "path": "fc"}, False, "read-only: another window steers this run"),
    ({"op": "freeze", "path": [1]}, True, "path must be a module or parameter name"),
    ({"op": "set_lr", "lr": math.nan}, True, "lr must be a positive number"),
    ({"op": "set_lr", "lr": True}, True, "lr must be a positive number"),
    ({"op": "set_lr", "lr": 0.1, "group": -1}, True, "group must be a param group's index"),
    ({"op": "callbacks", "callbacks": [{"kind": "code", "settings": {}}]}, True, "only Workbench's probe callback"),
    ({"op": "callbacks", "callbacks": [{"kind": "probe", "settings": {"fn": "os.system"}}]}, True,
     "probe settings refused: fn"),
    ({"op": "callbacks", "callbacks": [{"kind": "probe", "settings": {"bins": 1}}]}, True,
     "probe settings refused: wrong type of bins"),
    ({"op": "callback", "index": 0, "method": "__init__", "args": []}, True, "callback method '__init__' refused"),
    ({"op": "callback", "index": 0, "method": "set_cadence", "args": [0]}, True, "set_cadence takes every"),
])
def test_a_bad_command_is_one_line_for_the_window(msg, steering, problem):
    got = read_command(msg, steering)
    assert isinstance(got, str) and got.startswith(problem)


def test_good_commands_become_the_run_commands_and_reach_the_control():
    c = RunControl()
    for msg in ({"op": "freeze", "path": "fc"}, {"op": "unfreeze", "path": ["a", "b.weight"]},
                {"op": "set_lr", "lr": 3, "group": 1}, {"op": "save_now"}, {"op": "sample_now"}):
        cmd = read_command(msg, True)
        assert isinstance(cmd, WindowCommand) and steer_control(c, cmd)
    queued = c.take_commands()
    assert [type(q) for q in queued] == [SetTrainable, SetTrainable, SetLR, SaveNow, SampleNow]
    assert (queued[0].names, queued[0].flag, queued[1].names, queued[1].flag) == (["fc"], False, ["a", "b.weight"], True)
    assert (queued[2].lr, queued[2].group) == (3.0, 1)
    assert steer_control(c, read_command({"op": "pause"}, True)) and c.is_paused
    assert steer_control(c, read_command({"op": "resume"}, True)) and not c.is_paused
    assert steer_control(c, read_command({"op": "stop"}, True)) and c.stop_requested
    nan = read_command({"op": "resolve_nonfinite", "action": "lower_lr"}, True)
    assert nan.action == "lower_lr" and not steer_control(c, nan)  # each run answers it its own way
    probes = read_command({"op": "callbacks", "callbacks": [{"kind": "probe", "settings": {"every": 5}}]}, True)
    assert probes.probe_specs == [{"every": 5}] and not steer_control(c, probes)
    call = read_command({"op": "callback", "index": 1, "method": "set_probed", "args": [["fc"]]}, True)
    assert call.call == (1, "set_probed", [["fc"]])
