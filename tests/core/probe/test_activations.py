"""Forward-hook activation probes (workbench.core.probe.activations)."""

from __future__ import annotations

import gc
import math
import weakref

import numpy as np
import pytest
import torch
from torch import nn

from workbench.core.model.demo import DigitsCNN
from workbench.core.probe.activations import (
    ActivationProbe,
    iter_tensor_leaves,
    leaf_modules,
    probe_batch,
    random_input,
)


def _reference(t: torch.Tensor, bins: int):
    x = t.detach().double().reshape(-1)
    fin = x[torch.isfinite(x)]
    counts, _ = np.histogram(fin.numpy(), bins=bins, range=(fin.min().item(), fin.max().item()))
    return {
        "mean": fin.mean().item(),
        "std": fin.std().item(),
        "min": fin.min().item(),
        "max": fin.max().item(),
        "zero_fraction": (x == 0).double().mean().item(),
        "nonfinite_fraction": (~torch.isfinite(x)).double().mean().item(),
        "counts": counts,
    }


def _capture(module: nn.Module):
    seen = {}
    handle = module.register_forward_hook(lambda m, a, out: seen.__setitem__("out", out.detach().clone()))
    return seen, handle


def test_hook_statistics_equal_direct_statistics():
    model = DigitsCNN()
    names = ["features.0", "features.2", "features.10", "classifier"]
    probe = ActivationProbe(model, bins=32, hist_max_values=0)  # 0: histogram of every value
    refs = {}
    for n in names:
        probe.add(n)
        refs[n] = _capture(model.get_submodule(n))
    x = torch.randn(8, 1, 8, 8)
    model(x)
    stats = probe.collect(step=7)
    assert list(stats) == names
    for n in names:
        seen, handle = refs[n]
        handle.remove()
        out, s, ref = seen["out"], stats[n], _reference(seen["out"], 32)
        assert s.shape == tuple(out.shape) and s.step == 7 and s.dtype == "float32"
        for key in ("mean", "std", "min", "max", "zero_fraction", "nonfinite_fraction"):
            assert getattr(s, key) == pytest.approx(ref[key], rel=1e-5, abs=1e-6), (n, key)
        assert s.histogram.counts.sum() == out.numel()
        # floating-point bin edges may move a value by one bin; the shape must agree
        assert np.abs(s.histogram.counts - ref["counts"]).sum() <= 2
    probe.close()


def test_relu_zero_fraction_and_nonfinite_values():
    model = nn.Sequential(nn.Identity())
    x = torch.tensor([[0.0, 1.0, float("nan"), float("inf"), -2.0, 0.0, 3.0, 0.0]])
    with ActivationProbe(model) as probe:
        probe.add("0")
        model(x)
        s = probe.collect()["0"]
    assert s.zero_fraction == pytest.approx(3 / 8)
    assert s.nonfinite_fraction == pytest.approx(2 / 8)
    assert (s.min, s.max) == (-2.0, 3.0)
    assert s.mean == pytest.approx(2 / 6)
    assert s.histogram.counts.sum() == 6


def test_feature_map_grid_and_heatmaps():
    model = nn.Sequential(nn.Conv2d(3, 20, 3, padding=1), nn.Flatten(), nn.Linear(20 * 64 * 64, 4))
    stats = probe_batch(model, torch.randn(2, 3, 64, 64), ["0", "2"], max_channels=9, max_side=16)
    conv = stats["0"]
    assert conv.image_kind == "channels"
    assert conv.image.shape == (3 * 17 - 1, 3 * 17 - 1)  # 9 channels -> 3x3 tiles of 16 px, 1 px gaps
    assert np.nanmin(conv.image) >= 0 and np.nanmax(conv.image) <= 1
    assert np.isnan(conv.image[16, 0])  # a gap row
    lin = stats["2"]
    assert lin.image_kind == "heatmap" and lin.image.shape == (2, 4)


def test_tuple_outputs_are_probed_per_leaf():
    mha = nn.MultiheadAttention(16, 4, batch_first=True)
    lstm = nn.LSTM(16, 8, batch_first=True)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn, self.lstm = mha, lstm

        def forward(self, x):
            y, _ = self.attn(x, x, x)
            return self.lstm(y)[0]

    stats = probe_batch(Net(), torch.randn(2, 5, 16), ["attn", "lstm"])
    assert {"attn[0]", "attn[1]", "lstm[0]", "lstm[1.0]", "lstm[1.1]"} <= set(stats)
    assert stats["attn[1]"].shape == (2, 5, 5)  # averaged attention weights
    assert stats["lstm[1.0]"].shape == (1, 2, 8)  # h_n
    assert stats["attn[0]"].image_kind == "heatmap" and stats["attn[0]"].image.shape == (5, 16)
    leaves = list(iter_tensor_leaves({"a": (torch.ones(1), None, 3, torch.ones(2, dtype=torch.long))}))
    assert [k for k, _ in leaves] == ["a.0"]


def test_inplace_relu_is_measured_before_and_after_without_breaking_backward():
    lin = nn.Linear(4, 6)
    model = nn.Sequential(lin, nn.ReLU(inplace=True), nn.Linear(6, 1))
    with ActivationProbe(model) as probe:
        probe.set_probed(["0", "1"])
        x = torch.randn(32, 4)
        model(x).sum().backward()  # training forward with grad: hooks must not break autograd
        stats = probe.collect()
    pre = lin(x).detach()
    assert stats["0"].min == pytest.approx(pre.min().item())  # read before the in-place ReLU ran
    assert stats["0"].min < 0 and stats["1"].min == 0.0
    assert lin.weight.grad is not None


def test_hook_keeps_no_reference_to_the_output():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    with ActivationProbe(model) as probe:
        probe.set_probed(["0", "1", ""])
        out = model(torch.randn(4, 8, requires_grad=True))
        ref = weakref.ref(out)
        del out
        gc.collect()
        assert ref() is None
        assert len(probe.collect()) == 3


def test_probe_on_off_100_times_leaves_no_hooks():
    model = DigitsCNN()
    before = {n: dict(m._forward_hooks) for n, m in model.named_modules()}
    probe = ActivationProbe(model)
    names = leaf_modules(model)
    for i in range(100):
        probe.toggle(names[i % len(names)])
        if i % 7 == 0:
            probe.set_probed(names[:3])
    probe.set_probed([])
    assert probe.names == []
    for n, m in model.named_modules():
        assert dict(m._forward_hooks) == before[n]
    probe.add("classifier")
    probe.close()
    assert len(model.classifier._forward_hooks) == 0


def test_unknown_module_raises_key_error():
    probe = ActivationProbe(DigitsCNN())
    with pytest.raises(KeyError, match="nope"):
        probe.add("nope")
    with pytest.raises(KeyError):
        probe.set_probed(["classifier", "nope"])
    assert probe.names == []


def test_probe_batch_restores_train_eval_modes():
    model = DigitsCNN()
    model.train()
    model.features[1].eval()  # a frozen BatchNorm kept in eval
    modes = {n: m.training for n, m in model.named_modules()}
    seen = {}
    model.features[1].register_forward_hook(lambda m, a, o: seen.update(training=m.training))
    stats = probe_batch(model, random_input((4, 1, 8, 8)), ["features.1"])
    assert seen["training"] is False  # the forward ran in eval()
    assert {n: m.training for n, m in model.named_modules()} == modes
    assert stats["features.1"].shape == (4, 16, 8, 8)
    assert all(len(m._forward_hooks) == 1 for m in [model.features[1]])  # only the test's own hook


def test_disabled_probe_collects_nothing():
    model = nn.Linear(3, 3)
    with ActivationProbe(model) as probe:
        probe.add("")
        probe.enabled = False
        model(torch.randn(2, 3))
        assert probe.collect() == {}


def test_random_input_rejects_bad_shapes():
    with pytest.raises(ValueError):
        random_input((0, 3))


def test_random_input_for_an_embedding_model_is_token_ids_and_the_probe_runs():
    class Mean(nn.Module):
        def forward(self, x):
            return x.mean(dim=1)

    model = nn.Sequential(nn.Embedding(100, 32), nn.TransformerEncoderLayer(32, 4, 64, batch_first=True),
                          Mean(), nn.Linear(32, 3))
    x = random_input((4, 16), model=model)
    assert x.dtype == torch.int64 and tuple(x.shape) == (4, 16) and 0 <= int(x.min()) and int(x.max()) < 100
    assert random_input((4, 16), model=nn.Linear(16, 2)).dtype == torch.float32
    stats = probe_batch(model, x, ["0", "3"])
    assert stats["0"].shape == (4, 16, 32) and stats["3"].shape == (4, 3)


def test_constant_and_all_nonfinite_outputs():
    model = nn.Identity()
    with ActivationProbe(model) as probe:
        probe.add("")
        model(torch.zeros(3, 5))
        s = probe.collect()[""]
        assert s.zero_fraction == 1.0 and s.histogram.counts[0] == 15 and (s.min, s.max) == (0.0, 0.0)
        model(torch.full((2, 2), float("nan")))
        s = probe.collect()[""]
        assert s.nonfinite_fraction == 1.0 and math.isnan(s.mean) and s.histogram.counts.sum() == 0


def test_large_outputs_histogram_a_strided_subsample_but_exact_moments():
    model = nn.Identity()
    x = torch.randn(4, 8, 64, 64)  # 131,072 values
    with ActivationProbe(model, hist_max_values=10_000) as probe:
        probe.add("")
        model(x)
        s = probe.collect()[""]
    assert s.histogram.stride > 1 and s.histogram.stride % 2 == 1
    assert s.histogram.counts.sum() == x.reshape(-1)[:: s.histogram.stride].numel()
    assert s.mean == pytest.approx(x.mean().item(), abs=1e-6) and s.std == pytest.approx(x.std().item(), rel=1e-5)
    assert (s.min, s.max) == (x.min().item(), x.max().item())


def test_a_user_dataset_of_token_id_dicts_feeds_a_probe_batch():
    """The Probes' "Training dataset" source with a user's dataset: its dict batches, the label left out."""
    import importlib.util
    from pathlib import Path

    from workbench.core.probe.activations import dataset_batch, probe_batch
    from workbench.core.train.config import DataConfig

    folder = Path(__file__).resolve().parents[3] / "examples" / "text"
    spec = importlib.util.spec_from_file_location("text_task_probe_test", folder / "text_task.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TinyTextClassifier()
    batch = dataset_batch(DataConfig(dataset=f"{folder}/text_task.py:make_dataset", kwargs={"n": 40}), 4, model=model)
    assert set(batch.kwargs) == {"input_ids"} and batch.kwargs["input_ids"].shape == (4, 24)
    stats = probe_batch(model, batch, ["embed", "head"])
    assert stats["head"].shape == (4, 2) and stats["embed"].shape == (4, 24, 32)
