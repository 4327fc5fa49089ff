"""Warming an idle training process on the opened model (in this process: :func:`warm_model` is plain torch)."""

from __future__ import annotations

import torch
import torchvision
from torch import nn

from workbench.core.model.demo import DigitsCNN
from workbench.core.train.launch import training_process
from workbench.core.train.launch.training_process_main import WARM_STEPS, warm_model
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.launch.training_process import make_warm_up


def _config(batch_size=4, **kw):
    return TrainConfig(data=DataConfig(dataset="digits", batch_size=batch_size), **kw)


def test_a_torchvision_model_takes_its_training_steps_and_the_global_rng_is_left_alone():
    model = torchvision.models.resnet18(num_classes=10)
    model.fc.requires_grad_(False)  # a frozen head: its parameters get no optimizer state
    before = {k: v.clone() for k, v in model.state_dict().items()}
    spec = make_warm_up(model, _config(optimizer="sgd"), (1, 3, 32, 32))
    rng = torch.get_rng_state()
    assert warm_model(spec) == WARM_STEPS
    assert torch.equal(torch.get_rng_state(), rng)
    # the warm-up trained the process's own copy: the model handed in is untouched
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_job_waiting_ends_the_warm_up_after_the_step_under_way():
    spec = make_warm_up(DigitsCNN(), _config(), (1, 1, 8, 8))
    calls = []
    assert warm_model(spec, interrupted=lambda: calls.append(1) or len(calls) > 1) == 1


def test_the_warm_up_also_meets_the_last_smaller_batches_of_an_in_memory_dataset(monkeypatch):
    """digits: 1438 training and 359 validation samples; at batch 64 the run also meets 30 (training), 64 and 39."""
    from workbench.core.model.example_input import ExampleInput
    from workbench.core.train.launch import training_process_main as main

    assert main.run_batch_sizes(_config(batch_size=64)) == ([30], [64, 39])
    assert main.run_batch_sizes(TrainConfig(data=DataConfig(dataset="digits", batch_size=719))) == ([], [359])
    assert main.run_batch_sizes(TrainConfig(data=DataConfig(dataset="imagefolder", root="/nowhere"))) == ([], [])
    seen = []
    call = ExampleInput.call
    monkeypatch.setattr(ExampleInput, "call", lambda x, model: seen.append(
        (x.shape[0], "train" if model.training else "eval")) or call(x, model))
    spec = make_warm_up(DigitsCNN(), _config(batch_size=64), (1, 1, 8, 8))
    assert warm_model(spec) == WARM_STEPS
    assert seen == [(64, "train")] * WARM_STEPS + [(30, "train"), (64, "eval"), (39, "eval")]


def test_a_model_whose_forward_fails_is_simply_not_warmed():
    spec = make_warm_up(nn.Sequential(nn.Linear(5, 2)), _config(), (1, 8))  # the input shape does not fit
    assert spec is not None
    assert warm_model(spec) == 0


def test_nothing_is_sent_for_cuda_no_input_shape_or_a_large_model(monkeypatch):
    model = DigitsCNN()
    assert make_warm_up(model, _config(device="cuda"), (1, 1, 8, 8)) is None
    assert make_warm_up(model, _config(), None) is None
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    monkeypatch.setattr(training_process, "WARM_MAX_BYTES", size - 1)
    assert make_warm_up(model, _config(), (1, 1, 8, 8)) is None


def test_an_error_saying_a_dataloader_worker_died_carries_the_workers_last_output(tmp_path):
    """torch says "details are lost"; the worker wrote them to the process's output, which the error now carries."""
    from workbench.core.train.events import Metrics, RunError
    from workbench.core.train.launch.training_process_main import with_worker_output

    log = tmp_path / "process.log"
    log.write_text("epoch 1\nTraceback (most recent call last):\nModuleNotFoundError: No module named "
                   "'_workbench_factory_0123'\n")
    died = RunError("RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly")
    out = with_worker_output(died, str(log))
    assert out.text.startswith(died.text) and "No module named '_workbench_factory_0123'" in out.text
    other = RunError("ValueError: bad lr")
    assert with_worker_output(other, str(log)) is other
    assert with_worker_output(died, str(tmp_path / "missing.log")) is died
    metrics = Metrics.__new__(Metrics)
    assert with_worker_output(metrics, str(log)) is metrics
