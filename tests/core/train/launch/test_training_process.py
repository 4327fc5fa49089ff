"""Training in a training process (no Qt): the same weights as in this process, bit for bit.

Real spawned processes (multiprocessing, spawn) running the demo digits on CPU.
"""

from __future__ import annotations

import copy
import multiprocessing

import pytest
import torch
import torchvision

from workbench.core.model.demo import DigitsCNN
from workbench.core.probe.callback import ProbeCallback
from workbench.core.train.trainer.commands import SetTrainable
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.events import Finished, Metrics, Sink, apply_state, from_wire
from workbench.core.train.trainer.loop import Trainer
from workbench.core.train.launch.training_process import (
    ModelNotPortable,
    RemoteControl,
    TrainingProcess,
    encode_model,
    make_job,
    make_warm_up,
)


def _config(tmp_path, name, epochs=2):
    return TrainConfig(data=DataConfig(dataset="digits", batch_size=32), epochs=epochs, lr=3e-3, seed=7,
                       run_dir=str(tmp_path / name), tensorboard=False)


def _run(job, on_event=None, timeout=120.0):
    """Train ``job`` in a new training process; ``(reason, {event type name: [event, ...]})`` (decoded as the window does)."""
    proc = TrainingProcess()
    events: dict[str, list] = {}
    try:
        assert proc.wait_ready(), proc.log_tail()
        assert proc.start_job(job)
        while True:
            msg = proc.recv(timeout)
            assert msg is not None, "the training process went silent"
            event = from_wire(msg[1], msg[2])
            events.setdefault(type(event).__name__, []).append(event)
            if on_event is not None:
                on_event(proc, event)
            if isinstance(event, Finished):
                return event.reason, events
    finally:
        proc.end()


def _final_state(events) -> dict:
    return events["StateSynced"][-1].state


def test_a_run_in_a_training_process_ends_bit_identical_to_one_in_this_process(tmp_path):
    torch.manual_seed(0)
    model = DigitsCNN()
    for p in model.features[0].parameters():
        p.requires_grad_(False)  # a frozen set travels with the model
    here = copy.deepcopy(model)
    assert Trainer(here, _config(tmp_path, "here")).fit() == "completed"
    reason, events = _run(make_job(model, _config(tmp_path, "there"), arch={"name": "digits_cnn", "kwargs": {}}))
    assert reason == "completed"
    state = _final_state(events)
    for name, tensor in here.state_dict().items():
        assert torch.equal(state["state_dict"][name], tensor), name
    assert "features.0.weight" not in state["trainable"] and "classifier.weight" in state["trainable"]
    assert [e.metrics["epoch"] for e in events["EpochEnded"]] == [0, 1]
    assert multiprocessing.active_children() == []


def test_resume_in_a_training_process_is_bit_exact(tmp_path):
    torch.manual_seed(0)
    model = DigitsCNN()
    straight = copy.deepcopy(model)
    assert Trainer(straight, _config(tmp_path, "straight", epochs=3)).fit() == "completed"
    first = copy.deepcopy(model)
    assert Trainer(first, _config(tmp_path, "first", epochs=2)).fit() == "completed"
    job = make_job(first, _config(tmp_path, "second", epochs=3), resume=tmp_path / "first" / "last.pt")
    reason, events = _run(job)
    assert reason == "completed"
    assert len(events["EpochEnded"]) == 1  # only the third epoch ran
    state = _final_state(events)["state_dict"]
    for name, tensor in straight.state_dict().items():
        assert torch.equal(state[name], tensor), name


def test_commands_and_probes_reach_the_training_process(tmp_path):
    """Freeze mid-run and change what the probes follow: acknowledged, and the reports follow."""
    torch.manual_seed(0)
    probes = ProbeCallback(lambda r: None, every=2, probed=["features.0"])
    job = make_job(DigitsCNN(), _config(tmp_path, "run", epochs=30), callbacks=[probes])
    sent = {"freeze": False, "probes": False}

    def steer(proc, event):
        control = RemoteControl(proc)
        if isinstance(event, Metrics) and not sent["freeze"]:
            sent["freeze"] = True
            control.queue(SetTrainable(["features"], False))
            control.call_callback(0, "set_probed", ["classifier"])
        elif isinstance(event, Sink) and any("classifier" in r.activations for r in event.data):
            control.request_stop()  # the probes follow the new module: enough

    reason, events = _run(job, steer)
    assert reason == "stopped"
    applied = events["CommandApplied"][0].command  # the type it was queued as, its result filled in
    assert isinstance(applied, SetTrainable) and applied.changed
    assert all(n.startswith("features.") for n in applied.changed)
    reports = [r for e in events["Sink"] if e.index == 0 for r in e.data]
    probed = [set(r.activations) for r in reports if r.activations]
    assert probed[0] == {"features.0"} and probed[-1] == {"classifier"}
    state = _final_state(events)
    assert not any(n.startswith("features.") for n in state["trainable"])


def test_the_window_copy_takes_the_synced_state(tmp_path):
    torch.manual_seed(0)
    window_copy = torchvision.models.resnet18(num_classes=10)
    trained = copy.deepcopy(window_copy)
    with torch.no_grad():
        trained.fc.weight.add_(1.0)
    trained.layer1.requires_grad_(False)
    from workbench.core.train.events import StateSynced, model_state, to_wire

    name, fields = to_wire(StateSynced(model_state(trained)))  # as the training process sends it
    assert isinstance(fields["state"], bytes)
    apply_state(window_copy, from_wire(name, fields).state)
    assert torch.equal(window_copy.fc.weight, trained.fc.weight)
    assert not any(p.requires_grad for p in window_copy.layer1.parameters())
    assert window_copy.layer2[0].conv1.weight.requires_grad


def test_a_model_that_cannot_be_pickled_is_named():
    model = DigitsCNN()
    model.scale = lambda x: x  # a lambda does not pickle
    with pytest.raises(ModelNotPortable, match="cannot be pickled"):
        encode_model(model)


def _train_in_process(model, tmp_path, name):
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=32), epochs=1, seed=7,
                      run_dir=str(tmp_path / name), tensorboard=False)
    return _run(make_job(model, cfg))


def test_a_model_from_a_factory_file_trains_in_a_training_process(tmp_path):
    """A ``path/file.py:callable`` architecture: its classes live in a module only the file defines."""
    from workbench.core.model.meta_build import build_module

    source = tmp_path / "my_models.py"
    source.write_text(
        "from torch import nn\n\n"
        "class Tiny(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU())\n"
        "        self.head = nn.Linear(32, 10)\n\n"
        "    def forward(self, x):\n"
        "        return self.head(self.body(x))\n\n"
        "def make():\n"
        "    return Tiny()\n")
    model = build_module(f"{source}:make")
    model.body.requires_grad_(False)
    data, factories = encode_model(model)
    assert list(factories.values()) == [str(source)]
    reason, events = _train_in_process(model, tmp_path, "factory")
    assert reason == "completed", events.get("error")
    state = _final_state(events)
    assert torch.equal(state["state_dict"]["body.1.weight"], model.body[1].weight)  # frozen: unchanged
    assert not torch.equal(state["state_dict"]["head.weight"], model.head.weight)
    assert state["trainable"] == ["head.weight", "head.bias"]


def test_a_torchscript_model_trains_in_a_training_process(tmp_path):
    """A trusted TorchScript module crosses as its archive (``torch.jit.save``) and trains there."""
    import warnings

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script is deprecated; people still have such files
        scripted = torch.jit.script(DigitsCNN())
    reason, events = _train_in_process(scripted, tmp_path, "script")
    assert reason == "completed", events.get("error")
    state = _final_state(events)["state_dict"]
    assert not torch.equal(state["classifier.weight"], scripted.classifier.weight)  # it trained there


def test_a_process_warmed_up_on_the_model_still_ends_bit_identical(tmp_path):
    """The warm-up's throwaway steps (kernels created at the run's shapes) leave no trace in the run."""
    torch.manual_seed(0)
    model = DigitsCNN()
    here = copy.deepcopy(model)
    assert Trainer(here, _config(tmp_path, "here")).fit() == "completed"
    spec = make_warm_up(model, _config(tmp_path, "warm"), (1, 1, 8, 8))
    assert spec is not None and spec["input_shape"] == [1, 8, 8]
    proc = TrainingProcess()
    try:
        assert proc.wait_ready(), proc.log_tail()
        proc._pending.append(("event", "kept", ()))  # a message kept for recv() must not stall the wait
        proc.warm_up(spec)
        assert proc.wait_warm(60.0)  # the warm-up ends before the job is sent: a job waiting would cut it short
        assert proc.recv(0.0) == ("event", "kept", ())
        assert "warmed up on the opened model: 3 training steps" in proc.log_tail(), proc.log_tail()
        assert proc.start_job(make_job(model, _config(tmp_path, "there")))
        events: dict[str, list] = {}
        while "Finished" not in events:
            msg = proc.recv(120.0)
            assert msg is not None, "the training process went silent"
            event = from_wire(msg[1], msg[2])
            events.setdefault(type(event).__name__, []).append(event)
        assert [e.reason for e in events["Finished"]] == ["completed"]
    finally:
        proc.end()
    state = _final_state(events)
    for name, tensor in here.state_dict().items():
        assert torch.equal(state["state_dict"][name], tensor), name
    assert multiprocessing.active_children() == []


def test_the_training_process_runs_at_a_lower_priority_than_the_window(tmp_path):
    """Its nice value is this process's plus ``NICE_INCREMENT`` (> 0): the window wins a contended core."""
    import os

    from workbench.core.train.launch.training_process_main import NICE_INCREMENT

    if not hasattr(os, "getpriority"):
        pytest.skip("no nice values on this system")
    proc = TrainingProcess()
    try:
        assert proc.wait_ready(), proc.log_tail()
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert NICE_INCREMENT > 0
        assert os.getpriority(os.PRIO_PROCESS, proc.pid) == min(19, mine + NICE_INCREMENT)
    finally:
        proc.end()
