"""The events of a run (``workbench.core.train.events``): every event round-trips through its wire's one encoding."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from workbench.core.attach import script as attach_script
from workbench.core.attach.wire import UnknownType, decode, encode
from workbench.core.train.events import (EVENT_TYPES, ClassCountDiffers, CommandApplied, CudaMemory, EpochEnded,
                                         EventBridge, ExtrasReady, Finished, FitStarted, Metrics, NonFinite,
                                         Notice, Paused, ProgressText, RanksLine, RunError, Sink, StateSynced, apply_state,
                                         from_wire, model_state, pack_metrics, plain, to_wire)
from workbench.core.train.trainer.commands import Call, EmptyCudaCache, SaveNow, SetLR, SetTrainable

#: A frame's header (magic and body length): ``decode`` takes what follows it.
HEADER_BYTES = 8


def _every_event() -> list:
    """One instance of each event type, with the values a run sends."""
    model = nn.Linear(3, 2)
    model.bias.requires_grad_(False)
    return [
        FitStarted({"epoch": 0, "step": 0, "epochs": 2, "run_dir": "/tmp/run", "data_note": None, "history": []}),
        Metrics(pack_metrics([{"step": 1, "loss": 0.5}, {"step": 2, "loss": math.nan, "acc": 0.25}])),
        ProgressText("scanning images"),
        EpochEnded({"epoch": 0, "step": 2, "train_loss": 0.4, "val_loss": 0.3, "skipped": ["a.png"]}),
        CommandApplied(SetTrainable(["fc"], False, changed=["fc.weight"]), 2, 0.5),
        NonFinite(3, math.inf, {"module": "fc", "phase": "forward"}),
        ClassCountDiffers(10, 2, "the data has 10 classes"),
        RunError("Traceback ..."),
        ExtrasReady({"epoch": 1, "step": 2, "optimizer_state_dict": {"state": {}, "param_groups": []}}),
        Paused(4),
        StateSynced(model_state(model)),
        Sink(0, [1, 2, 3]),
        CudaMemory(1024.0, 2048.0),
        RanksLine("ranks: 0 step 40"),
        Notice("write_failed", "metrics.csv row not written: No space left on device", "/tmp/run/metrics.csv"),
        Finished("completed"),
    ]


def _same(a, b) -> None:
    """Equal, arrays and NaN included."""
    if isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    elif hasattr(a, "__dataclass_fields__"):
        assert type(a) is type(b)
        for name in a.__dataclass_fields__:
            _same(getattr(a, name), getattr(b, name))
    else:
        assert a == b


def test_every_event_type_is_declared_once():
    assert set(EVENT_TYPES) == {type(e).__name__ for e in _every_event()}


@pytest.mark.parametrize("event", _every_event(), ids=lambda e: type(e).__name__)
def test_every_event_round_trips_through_the_pipe_encoding(event):
    name, fields = to_wire(event)
    assert name == type(event).__name__
    _same(event, from_wire(name, fields))


def test_the_pipe_carries_tensors_as_bytes_and_a_call_without_its_function():
    name, fields = to_wire(StateSynced(model_state(nn.Linear(3, 2))))
    assert isinstance(fields["state"], bytes)
    name, fields = to_wire(CommandApplied(Call(lambda tr: None, result=3), 1, 0.0))
    assert fields["command"] == ("Call", {"result": 3})
    back = from_wire(name, fields).command
    assert type(back) is Call and back.fn is None and back.result == 3


@pytest.mark.parametrize("command", [SetTrainable("fc", True, changed=["fc.weight"]), SetLR(0.1, group=1),
                                     SaveNow(None, saved_to="/tmp/last.pt", nonfinite=["fc.bias"]),
                                     EmptyCudaCache()], ids=lambda c: type(c).__name__)
def test_every_command_comes_back_of_its_type_over_the_pipe(command):
    _same(command, from_wire(*to_wire(CommandApplied(command, 5, 1.5))).command)


def test_state_synced_over_the_pipe_restores_weights_and_frozen_set():
    trained, copy = nn.Linear(3, 2), nn.Linear(3, 2)
    trained.bias.requires_grad_(False)
    apply_state(copy, from_wire(*to_wire(StateSynced(model_state(trained)))).state)
    assert torch.equal(copy.weight, trained.weight) and not copy.bias.requires_grad and copy.weight.requires_grad


@pytest.mark.parametrize("event", [e for e in _every_event() if type(e) in attach_script.PUBLISHED],
                         ids=lambda e: type(e).__name__)
def test_every_event_a_script_publishes_round_trips_through_the_socket_encoding(event):
    frame = encode({"type": "event", "event": event})
    _same({"type": "event", "event": event}, decode(frame[HEADER_BYTES:]))


@pytest.mark.parametrize("event", [e for e in _every_event() if type(e) not in attach_script.PUBLISHED],
                         ids=lambda e: type(e).__name__)
def test_events_a_script_never_publishes_are_not_rebuilt_from_a_socket(event):
    with pytest.raises(TypeError):  # the sender has no wire form for them
        encode({"type": "event", "event": event})


def test_a_socket_message_of_an_unknown_type_is_refused_whole():
    frame = encode({"type": "event", "event": Paused(3)})
    body = frame[HEADER_BYTES:].replace(b'"Paused"', b'"Pausex"')
    with pytest.raises(UnknownType):
        decode(body)


def test_plain_and_pack_metrics_make_floats_of_tensors_and_nan_of_the_missing():
    assert plain(torch.tensor(2.5)) == 2.5 and plain({"a": (1, torch.tensor([1, 2]))})["a"][1].tolist() == [1, 2]
    packed = pack_metrics([{"step": 1, "loss": torch.tensor(0.5)}, {"step": 2, "acc": True}])
    assert packed["loss"].tolist()[0] == 0.5 and math.isnan(packed["loss"][1]) and math.isnan(packed["acc"][1])


def test_the_bridge_turns_hooks_into_events():
    sent: list = []
    bridge = EventBridge(sent.append)
    trainer = SimpleNamespace(epoch=0, step=3, batch_in_epoch=1, config=SimpleNamespace(epochs=2), run_dir=None,
                              data_note=None, history=[], steps_per_epoch=4, total_steps=8, train_loader=[0] * 4,
                              nonfinite_trace=None, optimizer=None, scheduler=None, device=torch.device("cpu"))
    bridge.on_fit_start(trainer)
    bridge.on_metrics(trainer, [{"step": 3, "loss": 0.1}])
    bridge.on_command_applied(trainer, SetLR(0.1))
    bridge.on_nonfinite(trainer, 3, math.nan)
    bridge.report_error("boom")
    bridge.report_error("again")  # once per run
    bridge.on_fit_end(trainer, "completed")
    kinds = [type(e) for e in sent]
    assert kinds == [FitStarted, Metrics, CommandApplied, NonFinite, RunError, ExtrasReady]
    assert sent[0].info["total_steps"] == 8 and sent[2].epoch == pytest.approx(0.25)
    assert sent[-1].extras == {"epoch": 0, "step": 3}
