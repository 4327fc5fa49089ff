"""timm as an architecture source: real timm models (random init) saved the ways people save them open as themselves.

Each of resnet50d, convnext_atto, vit_tiny_patch16_224, efficientnet_b0 and
mobilenetv3_small_100 is built with timm, saved as a bare state_dict, with a
``module.`` prefix (DataParallel / DDP) and as timm's ``train.py`` training
dict, detected as its own timm architecture at the top of the ranking, opened
with ``open_model``, frozen but for its classifier and trained one step. The
architecture index is built once for the module in a temporary cache folder.
"""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from workbench.core import contrib
from workbench.core.errors import ArchitectureError, TrustRequired
from workbench.core.model.meta_build import build_module
from workbench.core.model.spec import ArchSpec
from workbench.core.model.opening import NeedsArchitecture, Opened, open_model

import timm  # noqa: E402 - in the test extra

MODELS = ("resnet50d", "convnext_atto", "vit_tiny_patch16_224", "efficientnet_b0", "mobilenetv3_small_100")
FORMATS = ("bare", "module_prefix", "train_dict")


@pytest.fixture(scope="module", autouse=True)
def shared_cache(tmp_path_factory):
    """One cache folder (names list, architecture index) for the whole module, as a user's would be."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WORKBENCH_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def source_models() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    return {name: timm.create_model(name, pretrained=False).eval() for name in MODELS}


def _save(model: nn.Module, name: str, fmt: str, path) -> None:
    sd = model.state_dict()
    if fmt == "module_prefix":
        sd = {f"module.{k}": v for k, v in sd.items()}
    payload = {"arch": name, "state_dict": sd, "epoch": 3} if fmt == "train_dict" else sd
    torch.save(payload, path)


def _open(path, name: str) -> Opened:
    """``open_model`` as the window does it: the file's own arch entry, else the detected ranking's top."""
    try:
        return open_model(path)
    except NeedsArchitecture as needs:
        top = needs.candidates[0]
        assert top.spec.name == f"timm/{name}" and top.score == 1.0, needs.candidates[:3]
        return open_model(path, top.spec)


def _train_one_step(model: nn.Module, input_size: tuple[int, ...]) -> None:
    head = model.get_classifier()
    head_ids = {id(p) for p in head.parameters()}
    for p in model.parameters():
        p.requires_grad_(id(p) in head_ids)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    trained = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert frozen and trained
    model.train()
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    x = torch.randn(2, *input_size)
    loss = nn.functional.cross_entropy(model(x), torch.tensor([1, 2]))
    loss.backward()
    opt.step()
    params = dict(model.named_parameters())
    assert all(torch.equal(params[n], v) for n, v in frozen.items())
    assert any(not torch.equal(params[n], v) for n, v in trained.items())


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", MODELS)
def test_a_timm_checkpoint_opens_as_itself_and_trains(name, fmt, source_models, tmp_path):
    source = source_models[name]
    path = tmp_path / f"{name}.pth.tar"
    _save(source, name, fmt, path)
    opened = _open(path, name)
    assert type(opened.model) is type(source) and type(opened.model).__module__.startswith("timm.")
    assert opened.report.ok
    for key, value in source.state_dict().items():
        assert torch.equal(opened.model.state_dict()[key], value), key
    size = source.pretrained_cfg["input_size"]
    _train_one_step(opened.model, size if name.startswith("vit_") else (3, 64, 64))


def test_timm_names_are_registered_and_build_without_downloads():
    assert contrib.is_registered("architecture", "timm/resnet50d")
    assert contrib.is_registered("architecture", "convnext_atto")  # a bare timm name torchvision lacks
    assert not contrib.is_registered("architecture", "timm/no_such_model")
    assert contrib.timm_model("resnet50") is None  # torchvision's stays torchvision's
    assert type(build_module("resnet50", device="meta")).__module__ == "torchvision.models.resnet"
    names = contrib.names("architecture")
    assert {"timm/resnet50d", "timm/vit_tiny_patch16_224"} <= set(names) and "resnet18" in names
    row = next(c for c in contrib.contributions("architecture") if c.name == "timm/convnext_atto")
    assert row.target == "timm:create_model" and row.source == f"timm {timm.__version__}"
    model = build_module("timm/convnext_atto(num_classes=7)")
    assert model.get_classifier().out_features == 7
    assert type(build_module("resnet50d", device="meta")).__module__ == "timm.models.resnet"
    assert (contrib.cache_dir() / f"timm-{timm.__version__}-names.json").is_file()


def test_a_file_names_timm_models_without_trust_but_not_downloads_or_create_model(tmp_path):
    origin = tmp_path / "model.pth.tar"
    assert ArchSpec.from_file("resnet50d", origin) == ArchSpec("resnet50d")  # timm's train.py "arch"
    assert ArchSpec.from_file({"name": "timm/resnet50d", "kwargs": {"num_classes": 3}}, origin).kwargs == {
        "num_classes": 3}
    with pytest.raises(ArchitectureError, match="pretrained=True would download"):
        ArchSpec.from_file({"name": "timm/resnet50d", "kwargs": {"pretrained": True}}, origin)
    with pytest.raises(TrustRequired):  # create_model also takes hf-hub: names
        ArchSpec.from_file("timm:create_model('resnet50d')", origin)


def test_factory_specs_take_positional_arguments():
    for text in ("timm.create_model('resnet50d', num_classes=10)", "timm:create_model('resnet50d', num_classes=10)"):
        spec = ArchSpec.parse(text)
        assert spec == ArchSpec("timm:create_model", {"num_classes": 10}, args=("resnet50d",))
        assert str(spec) == "timm:create_model('resnet50d', num_classes=10)" and ArchSpec.parse(str(spec)) == spec
        assert spec.to_dict() == {"name": "timm:create_model", "kwargs": {"num_classes": 10}, "args": ["resnet50d"]}
        assert ArchSpec.from_dict(spec.to_dict()) == spec
        model = build_module(spec, device="meta")
        assert type(model).__name__ == "ResNet" and model.fc.out_features == 10
    assert ArchSpec.from_file({"name": "timm:create_model", "args": ["convnext_atto"]}, "x.pt", trust=True).args == (
        "convnext_atto",)
    with pytest.raises(ArchitectureError, match="argument 0 is a type"):
        ArchSpec.from_file({"name": "timm:create_model", "args": [nn.ReLU]}, "x.pt", trust=True)
    with pytest.raises(ArchitectureError, match="keyword arguments only"):
        ArchSpec.parse("resnet18(10)")


def test_workbench_imports_timm_only_when_needed():
    assert "timm" in sys.modules  # this module imported it; the subprocess check is tests/test_optional_extras.py
    assert contrib.timm_names() and "resnet50d" in contrib.timm_names()


def test_timm_pretrained_cfg_gives_the_input_shape():
    from workbench.core.model.example_input import timm_input_shape

    assert timm_input_shape("timm/efficientnet_b3") == (1, 3, 288, 288)  # not the 224 a torchvision model gets
    assert timm_input_shape("vit_tiny_patch16_224") == (1, 3, 224, 224)
    assert timm_input_shape("resnet18") is None  # torchvision's
