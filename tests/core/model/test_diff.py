"""Checkpoint diff: a head-only fine-tune changes only the head; the CLI prints it largest first."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
import torchvision

from workbench.core.model.diff import module_diff
from workbench.core.model.freezing import apply_frozen
from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.trainer.loop import Trainer


def test_a_head_only_fine_tune_lists_only_the_head(tmp_path):
    model = torchvision.models.resnet18(num_classes=10)
    apply_frozen(model, [n for n, _ in model.named_parameters() if not n.startswith("fc.")])
    data = DataConfig(dataset="fake", fake_shape=[3, 32, 32], fake_size=96, batch_size=16)
    run = tmp_path / "run"
    cfg = TrainConfig(data=data, epochs=1, lr=1e-2, run_dir=str(run), tensorboard=False)
    assert Trainer(model, cfg, arch="resnet18(num_classes=10)").fit() == "completed"

    start = torchvision.models.resnet18(num_classes=10)
    start.load_state_dict(torch.load(run / "init.pt", weights_only=True)["model_state_dict"])
    changes = module_diff(start, model)
    assert [c.module for c in changes] == ["fc"]  # frozen BatchNorm kept in eval(): its statistics stay
    assert 0 < changes[0].params < 1 and math.isnan(changes[0].buffers)

    out = subprocess.run([sys.executable, "-m", "workbench", "diff", str(run / "init.pt"), str(run / "last.pt")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fc  params ")


def test_buffers_and_shape_changes_are_reported_separately():
    a = torchvision.models.resnet18(num_classes=10)
    b = torchvision.models.resnet18(num_classes=10)
    b.load_state_dict(a.state_dict())
    with torch.no_grad():
        b.layer2[0].bn1.running_mean.add_(1.0)
        b.layer4[1].conv2.weight.mul_(1.5)
    changes = module_diff(a, b)
    assert [c.module for c in changes] == ["layer4.1.conv2", "layer2.0.bn1"] or \
        [c.module for c in changes] == ["layer2.0.bn1", "layer4.1.conv2"]
    conv = next(c for c in changes if c.module == "layer4.1.conv2")
    assert conv.params == pytest.approx(0.5, rel=1e-6) and math.isnan(conv.buffers)
    bn = next(c for c in changes if c.module == "layer2.0.bn1")
    assert bn.params == 0.0 and bn.buffers > 0
    assert changes == sorted(changes, key=lambda c: -c.largest)
    c = torchvision.models.resnet18(num_classes=5)
    assert module_diff(a, c)[0].note == "fc.bias shape (10,) vs (5,); fc.weight shape (10, 512) vs (5, 512)"


def _rel_whole(pairs):
    """The former reduction (a float64 copy of every whole tensor): the reference for the chunked one."""
    if not pairs:
        return math.nan
    d2 = sum(float(torch.sum((a.double() - b.double()) ** 2)) for a, b in pairs)
    w2 = sum(float(torch.sum(a.double() ** 2)) for a, _ in pairs)
    if d2 == 0:
        return 0.0
    return math.sqrt(d2) / math.sqrt(w2) if w2 > 0 else math.inf


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_chunked_reduction_equals_the_whole_tensor_one(monkeypatch, dtype):
    from workbench.core.model import diff

    monkeypatch.setattr(diff, "CHUNK", 1000)  # many chunks, ragged last one, rows split across chunks
    g = torch.Generator().manual_seed(0)
    a = torch.randn(37, 61, 5, generator=g).to(dtype)
    b = (a.float() + 0.01 * torch.randn(a.shape, generator=g)).to(dtype)
    pairs = [
        (a, b),                                                  # contiguous
        (a.transpose(0, 2), b.transpose(0, 2)),                  # non-contiguous, rows of 2257 > CHUNK: split
        (a[:, ::2], b[:, ::2]),                                  # strided rows
        (a.permute(1, 0, 2), b.permute(1, 0, 2).contiguous()),  # one side contiguous, the other not
        (a[0, 0, 0], b[0, 0, 0]),                                # 0-d
        (a[:, 3], b[:, 3]),                                      # 2-D non-contiguous, small rows
        (torch.zeros(0, 4, dtype=dtype), torch.zeros(0, 4, dtype=dtype)),
    ]
    for pa, pb in pairs:
        got = diff._rel([(pa, pb)])
        assert got == pytest.approx(_rel_whole([(pa, pb)]), rel=1e-9, nan_ok=True), (pa.shape, pa.stride())
    assert diff._rel(pairs) == pytest.approx(_rel_whole(pairs), rel=1e-9)
    assert diff._rel([(a, a.clone())]) == 0.0
    zeros = torch.zeros(5, dtype=dtype)
    assert diff._rel([(zeros, torch.ones(5, dtype=dtype))]) == math.inf


def test_chunks_never_exceed_the_chunk_and_cover_every_element(monkeypatch):
    from workbench.core.model import diff

    big_rows = torch.arange(3 * 5000, dtype=torch.float32).reshape(3, 5000).t().contiguous().t()  # rows > CHUNK
    for t in (big_rows, torch.arange(10_000.0), torch.arange(12_000.0).reshape(40, 300)[:, ::3]):
        pieces = list(diff._chunks(t, t.clone(), 1000))
        assert all(x.numel() <= 1000 and x.dim() == 1 for x, _ in pieces)
        assert torch.equal(torch.cat([x for x, _ in pieces]), t.reshape(-1))


DIFF_MEMORY = """
import resource, sys, torch
from torch import nn
from workbench.core.model.diff import module_diff

n = 32 * 2**20  # two float32 tensors of 128 MiB, already in memory
a, b = nn.Module(), nn.Module()
a.w = nn.Parameter(torch.randn(n))
b.w = nn.Parameter(a.w.detach() * 1.5)
module_diff(nn.Linear(2, 2), nn.Linear(2, 2))  # warm up torch's own allocations
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
changes = module_diff(a, b)
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
print(changes[0].params, grown)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in KiB on Linux")
def test_diff_memory_does_not_grow_with_tensor_size():
    """The former reduction grew the peak by 768 MiB here (float64 copies); two reused 2 MiB buffers by 4 MiB."""
    out = subprocess.run([sys.executable, "-c", DIFF_MEMORY], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rel, grown = map(float, out.stdout.split())
    assert rel == pytest.approx(0.5, rel=1e-6)
    assert grown < 64 * 2**20, grown / 2**20


def _expanded_files(tmp_path):
    """Two 1.3 KB files each holding a 10**6 x 10**6 tensor over a one-element storage (stride 0)."""
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save({"w": torch.zeros(1).expand(10**6, 10**6)}, a)
    torch.save({"w": torch.full((1,), 2.0).expand(10**6, 10**6)}, b)
    assert a.stat().st_size < 4096
    return a, b


def test_broadcast_tensors_are_reduced_once_not_walked_for_hours(tmp_path):
    """The chunked reduction walked all 10**12 elements (hours); common stride-0 dimensions count once, exactly."""
    import time

    from workbench.core.model.opening import open_model

    a, b = _expanded_files(tmp_path)
    start = time.perf_counter()
    ma = open_model(a, weights_only=True).model
    mb = open_model(b, weights_only=True).model
    assert module_diff(ma, mb)[0].params == math.inf  # a is zeros
    assert module_diff(mb, ma)[0].params == pytest.approx(1.0)
    assert module_diff(ma, ma) == []
    assert time.perf_counter() - start < 5
    out = subprocess.run([sys.executable, "-m", "workbench", "diff", str(b), str(a)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "(root)  params 1.000e+00"


def test_partly_broadcast_pairs_equal_the_whole_tensor_reduction():
    from workbench.core.model import diff

    g = torch.Generator().manual_seed(0)
    col_a, col_b = torch.randn(7, 1, generator=g), torch.randn(7, 1, generator=g)
    row = torch.randn(1, 5, generator=g)
    pairs = [(col_a.expand(7, 300), col_b.expand(7, 300)),               # stride 0 in both: reduced once
             (col_a.expand(7, 300), (col_b + 0 * row[:, :1]).expand(7, 300).contiguous()),  # one side only
             (row.expand(4, 5), row.expand(4, 5) * 1.5)]
    for pa, pb in pairs:
        assert diff._rel([(pa, pb)]) == pytest.approx(_rel_whole([(pa, pb)]), rel=1e-9)
    assert diff._rel(pairs) == pytest.approx(_rel_whole(pairs), rel=1e-9)


def test_a_view_reading_its_storage_over_and_over_is_refused_naming_tensor_and_file(tmp_path):
    """Different strides (nothing to reduce once): refused before any element is read, as a CheckpointError."""
    import time

    from workbench.core.errors import CheckpointError
    from workbench.core.model.opening import open_model

    n = 10**6
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    torch.save({"w": torch.zeros(1).expand(n, n)}, a)
    torch.save({"w": torch.zeros(2 * n, dtype=torch.float16).as_strided((n, n), (1, 1))}, b)  # overlapping rows
    start = time.perf_counter()
    ma, mb = open_model(a, weights_only=True).model, open_model(b, weights_only=True).model
    with pytest.raises(CheckpointError) as info:
        module_diff(ma, mb, names=(str(a), str(b)))
    assert str(info.value).startswith(f"{a}: tensor 'w' of shape (1000000, 1000000) is a view")
    assert time.perf_counter() - start < 5
    out = subprocess.run([sys.executable, "-m", "workbench", "diff", str(a), str(b)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "tensor 'w'" in lines[0] and "unexpected" not in lines[0], out.stderr


def test_many_views_of_one_storage_are_refused_but_tied_weights_count_once():
    from torch import nn

    from workbench.core.errors import CheckpointError
    from workbench.core.model import diff

    big = torch.randn(2 * diff.CHUNK)
    big_b = big * 1.5
    a, b = nn.Module(), nn.Module()
    for i in range(40):  # 40 distinct overlapping views of one storage on each side: 40x its elements to read
        a.register_buffer(f"v{i}", big[i:])
        b.register_buffer(f"v{i}", big_b[i:])
    with pytest.raises(CheckpointError, match="many different views of the same storages"):
        module_diff(a, b)
    tied_a, tied_b = nn.Module(), nn.Module()
    other = big * 2
    for i in range(40):  # the same view under 40 keys (a weight tied across layers): reduced once, exact
        tied_a.register_buffer(f"t{i}", big)
        tied_b.register_buffer(f"t{i}", other)
    changes = module_diff(tied_a, tied_b)
    assert len(changes) == 1 and changes[0].buffers == pytest.approx(1.0)


def test_subtree_changes_give_each_parent_the_largest_change_below():
    from workbench.core.model.diff import ModuleChange, subtree_changes

    rows = subtree_changes([ModuleChange("encoder.layer.0.query", params=0.01),
                            ModuleChange("encoder.layer.1.output", params=0.3, buffers=0.9),
                            ModuleChange("encoder.norm", buffers=0.05),
                            ModuleChange("head", note="head.weight shape (10, 4) vs (3, 4)")])
    assert rows["encoder"].value == 0.3 and rows["encoder"].source == "encoder.layer.1.output"  # params first
    assert rows["encoder.layer"].value == 0.3 and rows["encoder.layer.0"].value == 0.01
    assert rows["encoder.norm"].value == 0.05  # buffers only: its buffers' change
    assert rows[""].value == 0.3 and rows[""].notes == 1
    assert math.isnan(rows["head"].value) and rows["head"].notes == 1
    assert "decoder" not in rows


def test_a_bert_classifier_aligns_with_its_base_model_in_process():
    import transformers  # noqa: E402 - in the test extra: fails if missing, never skips
    from workbench.core.model.diff import compare_models

    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                                  vocab_size=100)
    base = transformers.BertModel(cfg)
    tuned = transformers.BertForSequenceClassification(cfg)
    tuned.bert.load_state_dict(base.state_dict())
    with torch.no_grad():
        tuned.bert.embeddings.LayerNorm.weight.mul_(2)
    comparison = compare_models(base, tuned)
    assert comparison.stripped == {"a": [], "b": ["bert."]}
    head, norm = comparison.changes  # nothing else: every other tensor matched across the prefix
    assert head.module == "classifier" and head.note == "classifier.bias only in b; classifier.weight only in b"
    assert norm.module == "embeddings.LayerNorm" and norm.params == pytest.approx(1.0)  # ones -> twos, bias 0
