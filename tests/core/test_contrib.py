"""The contributions registry: builtins, installed packages' entry points, specs, and the trust rule."""

from __future__ import annotations

import math
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import torch

from workbench.core import contrib
from workbench.core.errors import ArchitectureError, ContributionError, DataError, TrustRequired
from workbench.core.model.meta_build import build_module, list_architectures
from workbench.core.model.spec import ArchSpec
from workbench.core.model.demo import DigitsCNN

PLUGIN_MODULE = "workbench_example_plugin"

MARKING_FACTORY = """\
from pathlib import Path
from torch import nn
Path({marker!r}).write_text("imported")

def make(width=4):
    return nn.Linear(2, width)
"""


def test_kinds_and_their_entry_point_groups():
    assert contrib.KINDS == ("architecture", "dataset", "step", "metric", "loss", "probe", "format")
    assert [contrib.group(k) for k in contrib.KINDS] == [
        "workbench.architectures", "workbench.datasets", "workbench.steps", "workbench.metrics", "workbench.losses",
        "workbench.probes", "workbench.formats"]
    with pytest.raises(ValueError, match="unknown contribution kind 'model'; the kinds are architecture"):
        contrib.names("model")


def test_builtins_resolve_lazily_and_torchvision_builders_stay_registered():
    assert contrib.resolve("architecture", "digits_cnn") is DigitsCNN
    names = contrib.names("architecture")
    assert names[0] == "digits_cnn" and {"resnet18", "vit_b_16"} <= set(names)
    assert contrib.is_registered("architecture", "resnet18") and contrib.is_registered("architecture", "digits_cnn")
    resnet = contrib.resolve("architecture", "resnet18")(num_classes=3)  # weights=None: nothing downloaded
    assert resnet.fc.out_features == 3
    from workbench.core.probe.callback import ProbeCallback

    assert contrib.names("probe") == ["live_probes"]
    assert contrib.resolve("probe", "live_probes") is ProbeCallback
    # the spec a probe callback crosses into the training process as is the builtin's own target
    assert contrib.is_registered("probe", f"{ProbeCallback.__module__}:{ProbeCallback.__qualname__}")
    assert contrib.resolve("probe", f"{ProbeCallback.__module__}:{ProbeCallback.__qualname__}") is ProbeCallback


def test_an_installed_package_is_listed_without_being_imported(example_plugin, monkeypatch):
    monkeypatch.delitem(sys.modules, PLUGIN_MODULE, raising=False)
    names = contrib.names("architecture")
    assert names.index("digits_cnn") < names.index("tiny_mlp") < names.index("alexnet")  # builtins, packages, tv
    (row,) = [c for c in contrib.contributions("architecture") if c.name == "tiny_mlp"]
    assert row == contrib.Contribution("architecture", "tiny_mlp", f"{PLUGIN_MODULE}:TinyMLP",
                                       f"workbench-example-plugin {example_plugin.version}")
    assert contrib.is_registered("architecture", "tiny_mlp")
    assert contrib.is_registered("architecture", f"{PLUGIN_MODULE}:TinyMLP")
    assert list_architectures() == names  # the window's dialogs list this
    assert PLUGIN_MODULE not in sys.modules


def test_an_installed_architecture_builds_by_name(example_plugin):
    factory = contrib.resolve("architecture", "tiny_mlp")
    assert factory.__module__ == PLUGIN_MODULE and factory.__name__ == "TinyMLP"
    model = build_module("tiny_mlp(num_classes=3)")
    assert isinstance(model, factory)
    assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 3)
    assert build_module(ArchSpec("tiny_mlp"), device="meta").out.weight.is_meta


def test_a_file_naming_an_installed_architecture_needs_no_trust_and_cannot_download(example_plugin, tmp_path):
    origin = tmp_path / "model.pt"
    assert ArchSpec.from_file({"name": "tiny_mlp", "kwargs": {"num_classes": 4}}, origin) == ArchSpec(
        "tiny_mlp", {"num_classes": 4})
    assert contrib.check("architecture", f"{PLUGIN_MODULE}:TinyMLP", origin, trust=False) is None
    assert isinstance(contrib.resolve("architecture", "tiny_mlp", origin=origin)(), torch.nn.Module)
    with pytest.raises(ArchitectureError, match="pretrained=True would download weights"):
        ArchSpec.from_file({"name": "tiny_mlp", "kwargs": {"pretrained": True}}, origin)


def test_a_spec_read_from_a_file_needs_trust_and_nothing_is_imported_before(tmp_path):
    marker = tmp_path / "IMPORTED"
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "net.py").write_text(MARKING_FACTORY.format(marker=str(marker)))
    origin = folder / "run.toml"
    for spec in ("net.py:make", "os:system", f"{PLUGIN_MODULE}:Other"):
        with pytest.raises(TrustRequired) as caught:
            contrib.resolve("architecture", spec, origin=origin)
        assert caught.value.kind == "code" and caught.value.globals == [spec] and str(origin) in str(caught.value)
    assert not marker.exists()
    with pytest.raises(TrustRequired):
        contrib.resolve("dataset", "mydata.py:make", origin=origin)
    # with trust, a relative file resolves next to the file that names it, not in the current folder
    assert contrib.resolve("architecture", "net.py:make", origin=origin, trust=True)(width=5).out_features == 5
    assert marker.exists()


def test_a_spec_the_user_typed_is_allowed(tmp_path, monkeypatch):
    marker = tmp_path / "IMPORTED"
    (tmp_path / "net.py").write_text(MARKING_FACTORY.format(marker=str(marker)))
    monkeypatch.chdir(tmp_path)
    assert contrib.resolve("architecture", "net.py:make")(width=3).out_features == 3
    assert contrib.resolve("architecture", "workbench.core.model.demo:DigitsCNN") is DigitsCNN
    assert contrib.resolve("metric", "math:sqrt")(4.0) == 2.0
    module = sys.modules[contrib.resolve("architecture", f"{tmp_path / 'net.py'}:make").__module__]
    assert module.__name__.startswith(contrib.FILE_MODULE_PREFIX)  # how a training process re-imports it


def test_an_unknown_name_names_the_kind_and_what_is_available(example_plugin):
    with pytest.raises(ArchitectureError) as caught:
        contrib.resolve("architecture", "tiny_mpl")
    text = str(caught.value)
    assert text.startswith("unknown architecture 'tiny_mpl'; did you mean tiny_mlp")
    assert "Available: digits_cnn, tabular_mlp, tiny_mlp and " in text and "torchvision models" in text
    assert "workbench contributions architecture" in text and text.endswith("or path/to/file.py:callable.")
    with pytest.raises(ContributionError, match=r"unknown metric 'f1'\. None is registered .*workbench\.metrics"):
        contrib.resolve("metric", "f1")
    with pytest.raises(DataError, match="unknown dataset 'x'"):
        contrib.resolve("dataset", "x")
    with pytest.raises(ContributionError, match="step spec 'no_such_module_xyz:step' could not be imported"):
        contrib.resolve("step", "no_such_module_xyz:step")
    with pytest.raises(ContributionError, match="must be a non-empty string"):
        contrib.resolve("probe", "  ")


def _fake_entry_points(monkeypatch, *eps: EntryPoint) -> None:
    real = contrib.entry_points
    monkeypatch.setattr(contrib, "entry_points",
                        lambda group: [ep for ep in eps if ep.group == group] + list(real(group=group)))


def test_a_broken_or_ambiguous_package_is_a_clear_error(monkeypatch):
    group = "workbench.architectures"
    _fake_entry_points(monkeypatch, EntryPoint("broken_net", "no_such_module_xyz:Net", group),
                       EntryPoint("twice", "math:sqrt", group), EntryPoint("twice", "math:floor", group),
                       EntryPoint("not_callable", "math:pi", group), EntryPoint("bad:name", "math:sqrt", group),
                       EntryPoint("resnet18", "math:sqrt", group))
    names = contrib.names("architecture")
    assert {"broken_net", "twice", "not_callable"} <= set(names) and "bad:name" not in names
    assert names.count("resnet18") == 1 and contrib.resolve("architecture", "resnet18") is not math.sqrt  # builtin wins
    with pytest.raises(ArchitectureError, match=r"'broken_net' from an installed package could not be imported "
                                                r"\(ModuleNotFoundError.*Reinstall or update that package"):
        contrib.resolve("architecture", "broken_net")
    with pytest.raises(ArchitectureError, match="'twice' is registered by several packages"):
        contrib.resolve("architecture", "twice")
    with pytest.raises(ArchitectureError, match="'not_callable' .* is a float, not a callable"):
        contrib.resolve("architecture", "not_callable")


def test_kwargs_from_a_file_are_plain_data():
    assert contrib.plain_kwargs(None, "f.toml") == {}
    assert contrib.plain_kwargs({"a": [1, {"b": None}]}, "f.toml") == {"a": [1, {"b": None}]}
    with pytest.raises(ArchitectureError, match="architecture kwarg 'act' is a type"):
        contrib.plain_kwargs({"act": torch.nn.ReLU}, "f.toml")
    with pytest.raises(DataError, match="f.toml: the dataset's kwargs must be a table"):
        contrib.plain_kwargs([1, 2], "f.toml", kind="dataset")
    deep: list = []
    for _ in range(20):
        deep = [deep]
    with pytest.raises(ArchitectureError):
        contrib.plain_kwargs({"deep": deep}, Path("f.toml"))


PACKAGE_INIT = "from .helpers import WIDTH\n"
PACKAGE_HELPERS = "WIDTH = 6\n"
PACKAGE_NET = """\
from torch import nn

from ..helpers import WIDTH
from .blocks import block


def make():
    return nn.Sequential(block(), nn.Linear(WIDTH, 2))
"""
PACKAGE_BLOCKS = "from torch import nn\nfrom .. import helpers\n\n\ndef block():\n    return nn.Linear(3, helpers.WIDTH)\n"


def test_a_file_with_relative_imports_is_imported_as_part_of_its_package(tmp_path, monkeypatch):
    root = tmp_path / "facenet_like"
    (root / "models").mkdir(parents=True)
    (root / "__init__.py").write_text(PACKAGE_INIT)
    (root / "helpers.py").write_text(PACKAGE_HELPERS)
    (root / "models" / "__init__.py").write_text("")
    (root / "models" / "net.py").write_text(PACKAGE_NET)
    (root / "models" / "blocks.py").write_text(PACKAGE_BLOCKS)
    path_before = list(sys.path)
    factory = contrib.resolve("architecture", f"{root / 'models' / 'net.py'}:make")
    model = factory()
    assert model(torch.zeros(1, 3)).shape == (1, 2)
    assert sys.path == path_before  # the package's parent folder was on sys.path only during the import
    name = factory.__module__
    assert name.startswith(contrib.FILE_MODULE_PREFIX) and name.endswith(".models.net")
    assert name == contrib.file_module_name(root / "models" / "net.py")
    assert "facenet_like" not in sys.modules  # under a name of its own: no clash with an installed package
    # a training process imports it again from the name and the file alone
    for mod in [m for m in sys.modules if m.split(".")[0] == name.split(".")[0]]:
        monkeypatch.delitem(sys.modules, mod)
    assert contrib.import_file_module(name, root / "models" / "net.py").make is not factory
    # the top package alone, by its own name and its __init__.py (what a spawned DataLoader worker imports
    # first: every file module the parent had, packages included), with its relative imports
    top = name.split(".")[0]
    for mod in [m for m in sys.modules if m.split(".")[0] == top]:
        monkeypatch.delitem(sys.modules, mod)
    assert contrib.import_file_module(top, root / "__init__.py").__path__ == [str(root.resolve())]
    # with trust, a relative path from a file still resolves next to that file
    origin = root / "run.toml"
    assert contrib.resolve("architecture", "models/net.py:make", origin=origin, trust=True)()[1].out_features == 2
    # a lone file (no relative import) keeps its single-module name
    (tmp_path / "plain.py").write_text(MARKING_FACTORY.format(marker=str(tmp_path / "m")))
    assert "." not in contrib.file_module_name(tmp_path / "plain.py")


def test_a_moved_builder_resolves_by_its_old_name():
    """Files saved before the model folders' builders moved name them in hf_folder: they still resolve."""
    from workbench.core.model import hf_build

    for old, new in contrib.MOVED_SPECS.items():
        assert contrib.canonical_spec(old) == new
        assert contrib.is_registered("architecture", old)  # no trust question for Workbench's own builder
    assert contrib.resolve("architecture", "workbench.core.model.hf_folder:build_timm_model",
                           origin="old.pt") is hf_build.build_timm_model


def test_the_cache_writer_is_the_one_atomic_writer(tmp_path, monkeypatch):
    """contrib's cache files go through files.atomic_write_bytes, whose temp files remove_stale_temps cleans."""
    import os
    import time

    from workbench.core.files import remove_stale_temps

    stale = tmp_path / ".timm-1.0-names.json.abcd1234.tmp"  # what contrib's own writer used to leave
    stale.write_text("x")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    assert remove_stale_temps(tmp_path) == [stale]
    assert not hasattr(contrib, "write_atomic")
