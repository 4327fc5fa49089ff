"""Reading every checkpoint form: formats, metadata, prefixes, bit-exact round trips."""

from __future__ import annotations

import shutil

import pytest
import torch

from tests.core.model.checkpoint_files import (
    SMALL_VIT_SPEC,
    TRUSTED_FORMS,
    example_input,
    make_model,
    save_all_forms,
    save_safetensors,
    save_state_dict,
    save_torchscript,
)
from workbench.core.errors import TrustRequired
from workbench.core.model.loading import load_model
from workbench.core.model.spec import ArchSpec
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.formats.metadata import tensor_stats
from workbench.core.model.formats.optimizer_guess import guess_optimizer_class
from workbench.core.model.formats.sniff import detect_container
from workbench.core.model.prefixes import strip_prefixes

MODELS = {
    "resnet18": (lambda: make_model("resnet18", num_classes=10), ArchSpec("resnet18", {"num_classes": 10})),
    "mobilenet_v3_small": (lambda: make_model("mobilenet_v3_small"), ArchSpec("mobilenet_v3_small")),
    "small_vit": (lambda: make_model("small_vit"), ArchSpec(SMALL_VIT_SPEC)),
}

EXPECTED = {  # form -> (format, container, state_dict_key, stripped prefixes)
    "state_dict": ("state_dict", "zip", None, []),
    "state_dict_legacy": ("state_dict", "legacy_pickle", None, []),
    "module_prefix": ("state_dict", "zip", None, ["module."]),
    "compiled_prefix": ("state_dict", "zip", None, ["_orig_mod."]),
    "ddp_compiled_prefix": ("state_dict", "zip", None, ["module.", "_orig_mod."]),
    "training_dict": ("training_dict", "zip", "model_state_dict", []),
    "lightning": ("lightning", "zip", "state_dict", ["model."]),
    "safetensors": ("safetensors", "safetensors", None, []),
    "pickled_module": ("pickled_module", "zip", None, []),
    "torchscript": ("torchscript", "torchscript", None, []),
    **{f"training_{k}": ("training_dict", "zip", k, []) for k in ("state_dict", "model", "net", "model_state", "ema", "weights")},
}


@pytest.fixture(scope="module", params=list(MODELS))
def saved(request, tmp_path_factory):
    """(name, model, spec, {form: path}) for each real architecture, saved once per module."""
    torch.manual_seed(0)
    build, spec = MODELS[request.param]
    model = build()
    example = example_input(request.param) if request.param == "small_vit" else None  # tracing is slow
    paths = save_all_forms(model, tmp_path_factory.mktemp(request.param), example)
    return request.param, model, spec, paths


def assert_same_tensors(expected: dict, actual: dict) -> None:
    assert list(actual) == list(expected)
    for key, value in expected.items():
        assert actual[key].dtype == value.dtype, key
        assert torch.equal(actual[key], value), key


def test_every_form_reads_and_loads_bit_exact(saved):
    name, model, spec, paths = saved
    expected = model.state_dict()
    for form, path in paths.items():
        fmt, container, key, stripped = EXPECTED[form]
        ckpt = read_checkpoint(path, trust=form in TRUSTED_FORMS)
        meta = ckpt.metadata
        assert (meta.format, meta.container, meta.state_dict_key) == (fmt, container, key), form
        loaded, report = load_model(ckpt, None if form in TRUSTED_FORMS else spec)
        assert report.ok and report.stripped_prefixes == stripped, form
        assert_same_tensors(expected, loaded.state_dict())
        assert all(p.device.type == "cpu" for p in loaded.parameters())


def test_trusted_forms_need_trust(saved):
    _, model, _, paths = saved
    for form in TRUSTED_FORMS:
        if form not in paths:
            continue
        with pytest.raises(TrustRequired) as info:
            read_checkpoint(paths[form])
        assert info.value.kind == ("torchscript" if form == "torchscript" else "pickle")
        assert str(paths[form]) in str(info.value)
    if "pickled_module" in paths:
        with pytest.raises(TrustRequired) as info:
            read_checkpoint(paths["pickled_module"])
        assert f"{type(model).__module__}.{type(model).__name__}" in info.value.globals


@pytest.mark.parametrize("name", ["small_vit"])
def test_torchscript_module_is_the_model(name, tmp_path):
    model = make_model(name)
    x = example_input(name)
    ckpt = read_checkpoint(save_torchscript(model, tmp_path / "ts.pt", x), trust=True)
    assert_same_tensors(model.state_dict(), ckpt.state_dict)
    with torch.no_grad():
        assert torch.allclose(ckpt.module(x), model(x), atol=1e-5)


def test_metadata_of_training_dict_and_lightning(saved):
    _, model, _, paths = saved
    sd = model.state_dict()
    meta = read_checkpoint(paths["training_dict"]).metadata
    assert (meta.epoch, meta.loss, meta.optimizer_class) == (3, 0.25, "AdamW")
    assert meta.optimizer_hparams["lr"] == pytest.approx(3e-4)
    assert meta.optimizer_hparams["weight_decay"] == pytest.approx(0.05)
    assert "params" not in meta.optimizer_hparams
    assert meta.num_tensors == len(sd)
    assert meta.total_params == sum(t.numel() for t in sd.values())
    assert meta.file_size == paths["training_dict"].stat().st_size
    counts: dict[str, int] = {}
    for t in sd.values():
        counts[str(t.dtype).removeprefix("torch.")] = counts.get(str(t.dtype).removeprefix("torch."), 0) + 1
    assert meta.dtypes == counts

    light = read_checkpoint(paths["lightning"]).metadata
    assert (light.epoch, light.global_step, light.optimizer_class) == (4, 500, "SGD")
    assert light.optimizer_hparams["momentum"] == pytest.approx(0.9)
    assert light.extra["hyper_parameters"] == {"lr": 0.1, "num_classes": 10}
    assert light.extra["lr_schedulers"][0]["step_size"] == 10
    assert light.extra["pytorch-lightning_version"] == "2.4.0"

    st = read_checkpoint(paths["safetensors"]).metadata
    assert st.extra["__metadata__"] == {"format": "pt", "note": "test"}


def test_format_comes_from_content_not_suffix(saved, tmp_path):
    _, model, _, paths = saved
    fake_pt = shutil.copy(paths["safetensors"], tmp_path / "looks_like.pt")
    fake_st = shutil.copy(paths["state_dict"], tmp_path / "looks_like.safetensors")
    assert detect_container(fake_pt) == "safetensors"
    assert detect_container(fake_st) == "zip"
    assert read_checkpoint(fake_pt).metadata.format == "safetensors"
    assert read_checkpoint(fake_st).metadata.format == "state_dict"


def test_zip_files_are_memory_mapped(tmp_path, monkeypatch):
    path = save_state_dict(torch.nn.Linear(4, 2), tmp_path / "w.pt")
    legacy = save_state_dict(torch.nn.Linear(4, 2), tmp_path / "old.pt", legacy=True)
    calls = []
    real_load = torch.load

    def spy(*args, **kwargs):
        calls.append((kwargs.get("mmap"), kwargs.get("weights_only"), kwargs.get("map_location")))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    read_checkpoint(path)
    read_checkpoint(legacy)
    assert calls == [(True, True, "cpu"), (False, True, "cpu")]


def test_tied_tensors_are_counted_once():
    w = torch.randn(10, 4)
    sd = {"embed.weight": w, "head.weight": w, "head.bias": torch.zeros(10)}
    assert tensor_stats(sd) == (3, 50, {"float32": 3})


def test_strip_prefixes_always_and_nested():
    sd = {"module._orig_mod.conv.weight": torch.zeros(1), "module._orig_mod.fc.bias": torch.zeros(1)}
    out, stripped = strip_prefixes(sd)
    assert list(out) == ["conv.weight", "fc.bias"] and stripped == ["module.", "_orig_mod."]
    inner, stripped = strip_prefixes({"model._orig_mod.fc.bias": torch.zeros(1)})
    assert list(inner) == ["model.fc.bias"] and stripped == ["_orig_mod."]


def test_wrapper_prefix_only_when_it_matches_the_architecture():
    sd = {"model.fc.weight": torch.zeros(1), "model.fc.bias": torch.zeros(1), "criterion.weight": torch.zeros(1)}
    untouched, stripped = strip_prefixes(sd)
    assert untouched == sd and stripped == []
    out, stripped = strip_prefixes(sd, reference_keys=["fc.weight", "fc.bias"])
    assert set(out) == {"fc.weight", "fc.bias", "criterion.weight"} and stripped == ["model."]
    same, stripped = strip_prefixes(sd, reference_keys=["model.fc.weight", "model.fc.bias"])
    assert same == sd and stripped == []
    nested, stripped = strip_prefixes({"net.backbone.conv.weight": torch.zeros(1)}, reference_keys=["conv.weight"])
    assert list(nested) == ["conv.weight"] and stripped == ["net.", "backbone."]


def test_module_prefix_kept_when_the_architecture_uses_it():
    sd = {"module.weight": torch.zeros(1)}
    out, stripped = strip_prefixes(sd, reference_keys=["module.weight"])
    assert out == sd and stripped == []


@pytest.mark.parametrize(
    ("opt", "expected"),
    [
        (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), "SGD"),
        (lambda p: torch.optim.Adam(p, lr=1e-3), "Adam"),
        (lambda p: torch.optim.AdamW(p, lr=1e-3), "AdamW"),
        (lambda p: torch.optim.RMSprop(p, lr=1e-3), "RMSprop"),
        (lambda p: torch.optim.Adagrad(p, lr=1e-3), "Adagrad"),
    ],
)
def test_optimizer_class_is_inferred_from_param_groups(opt, expected):
    group = opt([torch.nn.Parameter(torch.zeros(2))]).state_dict()["param_groups"][0]
    assert guess_optimizer_class(group.keys(), group) == expected


def test_safetensors_with_workbench_metadata(tmp_path):
    model = torch.nn.Linear(3, 2)
    meta = {"arch": '{"name": "x.y:make", "kwargs": {"n": 2}}', "frozen": '["weight"]', "epoch": "5"}
    path = save_safetensors(model, tmp_path / "m.safetensors", metadata=meta)
    got = read_checkpoint(path).metadata
    assert got.arch == {"name": "x.y:make", "kwargs": {"n": 2}}
    assert got.frozen == ["weight"] and got.epoch == 5
