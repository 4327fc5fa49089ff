"""The checks a window makes on what a script sends (``workbench.core.attach.schema``): everything a real
script sends passes, through the wire as it travels; a wrong type or shape is named in one line; the limits hold."""

from __future__ import annotations

import numpy as np
import pytest
from torchvision.models import resnet18

from workbench.core.attach import script as _registers_the_events_for_the_wire  # noqa: F401
from workbench.core.attach.schema import (MAX_DEPTH, MAX_MODULES, MAX_TENSORS, MAX_TEXT_CHARS, SchemaError,
                                          check_ack, check_event, check_welcome)
from workbench.core.attach.wire import decode, encode
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.skeleton import describe_structure
from workbench.core.probe.activations import leaf_modules
from workbench.core.probe.callback import ProbeCallback
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.events import (CommandApplied, EpochEnded, Finished, FitStarted, Metrics, NonFinite,
                                         Paused, ProgressText, RunError, Sink)
from workbench.core.train.trainer.commands import SampleNow, SaveNow, SetLR, SetTrainable
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer


def _through_the_wire(obj):
    return decode(encode(obj)[8:])


class _Events(Callback):
    """Every epoch end of the trainer, as the script's ``epoch_end`` publishes it."""

    def __init__(self):
        self.epochs: list[dict] = []

    def on_epoch_end(self, trainer, metrics) -> None:  # noqa: D102
        self.epochs.append(dict(metrics))


def test_what_a_real_run_sends_passes_after_the_wire(tmp_path):
    model = DigitsCNN()
    reports: list = []
    probes = ProbeCallback(reports.extend, every=3, probed=leaf_modules(model)[:4], flush_ms=0)
    epochs = _Events()
    config = TrainConfig(data=DataConfig(dataset="digits", batch_size=256), epochs=1, run_dir=str(tmp_path / "run"),
                         tensorboard=False, checkpoint_every_epoch=False)
    trainer = Trainer(model, config, [probes, epochs])
    assert trainer.fit() == "completed"
    assert reports and any(r.activations for r in reports) and any(r.layers is not None for r in reports)
    assert epochs.epochs
    events = [FitStarted({"epoch": 0, "step": 0, "epochs": 0, "run_dir": "/r", "data_note": "n",
                          "history": epochs.epochs}),
              Metrics({"step": np.arange(1.0, 4.0), "loss": np.ones(3), "lr": np.full(3, 0.1)}),
              EpochEnded(epochs.epochs[0]), Sink(0, reports), Paused(3), ProgressText("x"), RunError("tb"),
              CommandApplied(SetTrainable(["fc"], False, changed=["fc.weight"]), 3, 0.5),
              CommandApplied(SetLR(0.1, 0), 3, 0.5), CommandApplied(SaveNow(None, "/r/last.pt", ["x"]), 3, 0.5),
              CommandApplied(SampleNow([{"step": 3, "epoch": 0, "prompt": "a", "completion": " b", "on_demand": True}]),
                             3, 0.5), CommandApplied(SampleNow(error="no prompts yet"), 3, 0.5),
              NonFinite(3, float("nan"), {}), NonFinite(3, float("inf"), {
                  "step": 3, "phase": "forward", "module": "fc", "module_type": "Linear", "parameter": "",
                  "kind": "NaN", "broken_weights": [], "exact": False}), Finished("completed")]
    for event in events:
        check_event(event)
        check_event(_through_the_wire({"event": event})["event"])


def test_a_real_models_welcome_passes():
    info = {"name": "s", "pid": 12, "address": "127.0.0.1:5", "run_dir": "/r", "model": describe_structure(resnet18()),
            "model_class": "ResNet", "step": 0, "epoch": 0, "paused": False, "lrs": [0.1, 0.01], "device": "cpu",
            "torch": "2.5"}
    welcome = _through_the_wire({"type": "welcome", "info": info, "steering": True, "steered_elsewhere": False,
                                 "history": 3})
    assert check_welcome(welcome) == info


@pytest.mark.parametrize("event, fragment", [
    (Paused("3"), "Paused.step: expected an integer, got str '3'"),
    (Paused(True), "Paused.step: expected an integer, got bool"),
    (Sink(-1, []), "Sink.index: a negative index -1"),
    (Sink(0, "reports"), "Sink.data: expected a list of probe reports"),
    (CommandApplied(Paused(1), 1, 1.0), "CommandApplied.command: expected a command"),
    (CommandApplied(SetTrainable(["fc"], False, changed="fc.weight"), 1, 1.0), ".command.changed: expected a list"),
    (CommandApplied(SampleNow([{"prompt": [1]}]), 1, 1.0), ".command.rows[0]['prompt']: expected"),
    (NonFinite(1, 1.0, {"broken_weights": "fc"}), "NonFinite.trace['broken_weights']"),
    (ProgressText("x" * (MAX_TEXT_CHARS + 1)), f"limit {MAX_TEXT_CHARS:,}"),
    (Metrics({"step": np.arange(3.0), "loss": np.ones(2)}), "Metrics.values['loss']: 2 values where the others"),
    (Metrics({1: np.ones(2)}), "Metrics.values: a key int"),
    (SetLR(0.1), "SetLR is not an event a script sends"),
])
def test_a_wrong_event_is_named_in_one_line(event, fragment):
    with pytest.raises(SchemaError) as err:
        check_event(event)
    assert fragment in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_replies_are_checked():
    check_ack({"type": "ack", "id": 3, "ok": False, "error": "refused"})
    with pytest.raises(SchemaError, match=r"reply\['ok'\]"):
        check_ack({"type": "ack", "id": 3, "ok": "yes"})


def test_the_limits_hold_at_their_edge():
    def welcome(modules, params=()):
        return {"type": "welcome", "info": {"model": {"modules": modules, "params": list(params), "buffers": []}}}

    flat = [["", "R"]] + [[f"m{i}", "L"] for i in range(MAX_MODULES - 1)]
    check_welcome(welcome(flat, ([f"m{i}.weight", [2], "float32", True] for i in range(MAX_TENSORS))))
    with pytest.raises(SchemaError, match="modules"):
        check_welcome(welcome(flat + [["extra", "L"]]))
    with pytest.raises(SchemaError, match="parameters and buffers"):  # counted before any entry is looked at
        check_welcome(welcome(flat[:2], [["m0.weight", [2], "float32", True]] * (MAX_TENSORS + 1)))
    deepest = [["", "R"]] + [[".".join(["m"] * i), "L"] for i in range(1, MAX_DEPTH + 1)]
    check_welcome(welcome(deepest))
    with pytest.raises(SchemaError, match=f"{MAX_DEPTH + 1} levels deep"):
        check_welcome(welcome(deepest + [[".".join(["m"] * (MAX_DEPTH + 1)), "L"]]))
