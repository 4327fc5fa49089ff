"""The architecture index: built once per library version in the cache folder, read back without building."""

from __future__ import annotations

import gzip
import json

import pytest
import torch

from workbench import cli
from workbench.core import versions
from workbench.core.model import arch_index
from workbench.core.model.detection import _variants, detect_architecture
from workbench.core.model.meta_build import build_module

import timm  # noqa: E402 - in the test extra

#: timm families the tests index (every other family is left out to keep builds short).
FAMILIES = ("convnext", "mobilenetv3", "resnet")


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """A fresh cache folder; timm's families limited to :data:`FAMILIES`, torchvision to three models."""
    monkeypatch.setenv("WORKBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(timm, "list_modules", lambda: list(FAMILIES))
    monkeypatch.setattr(arch_index, "_torchvision_list", lambda: ["mobilenet_v3_small", "resnet18", "resnet50"])
    arch_index.clear_memory()
    yield tmp_path / "cache"
    arch_index.clear_memory()


def _timm_sd(name: str) -> dict[str, torch.Tensor]:
    return build_module(f"timm/{name}", device="meta").state_dict()


def test_skeleton_and_jaccard():
    assert arch_index.skeleton(["layer1.0.conv1.weight", "layer12.3.conv1.weight", "fc.bias"]) == {
        "layer#.#.conv#.weight", "fc.bias"}
    assert arch_index.jaccard({"a", "b"}, {"b", "c"}) == pytest.approx(1 / 3)
    assert arch_index.jaccard(set(), set()) == 0.0


def test_a_query_builds_what_it_needs_once_then_reads_it_without_building(cache, monkeypatch):
    sd = _timm_sd("convnext_atto")
    ranking = detect_architecture(sd, top_k=3)
    assert ranking[0].spec.name == "timm/convnext_atto" and ranking[0].score == 1.0
    folder = cache / "arch_index" / f"timm-{timm.__version__}"
    assert (folder / "families.json.gz").is_file() and (folder / "convnext.json.gz").is_file()
    assert not (folder / "resnet.json.gz").exists()  # a family the key names do not point at is not built
    tv = cache / "arch_index" / f"torchvision-{versions.library_version('torchvision')}.json.gz"
    data = json.loads(gzip.decompress(tv.read_bytes()))
    assert data["format"] == arch_index.FORMAT and set(data["models"]) == {"mobilenet_v3_small", "resnet18", "resnet50"}

    arch_index.clear_memory()  # a new process: everything comes from disk

    def no_builds(name):
        raise AssertionError(f"built {name}")

    monkeypatch.setattr(arch_index, "_build", no_builds)
    assert detect_architecture(sd, top_k=3) == ranking


def test_key_names_pick_the_family_and_shapes_pick_the_model():
    families = arch_index.timm_families()
    assert set(families) == set(FAMILIES)
    assert families["resnet"]["rep"] == "timm/resnet18" and "timm/resnet50d" in families["resnet"]["models"]
    picked = arch_index.pick_families(_variants(_timm_sd("mobilenetv3_small_100")))
    assert picked[0][0] == "mobilenetv3"
    ranking = detect_architecture(_timm_sd("resnet50d"), top_k=5)
    assert ranking[0].spec.name == "timm/resnet50d" and ranking[0].score == 1.0
    assert all(c.score < 1 for c in ranking[1:])


def test_a_torchvision_twin_is_listed_once_under_torchvision():
    ranking = detect_architecture(build_module("resnet18", device="meta").state_dict(), top_k=5)
    assert ranking[0].spec.name == "resnet18" and ranking[0].score == 1.0
    assert "timm/resnet18" not in [c.spec.name for c in ranking]  # the same keys and shapes
    assert all(c.score < 1 for c in ranking[1:])


def test_a_damaged_file_is_rebuilt_and_a_new_version_gets_its_own(cache, monkeypatch):
    arch_index.timm_families()
    path = cache / "arch_index" / f"timm-{timm.__version__}" / "families.json.gz"
    path.write_bytes(b"not gzip")
    arch_index.clear_memory()
    assert set(arch_index.timm_families()) == set(FAMILIES)
    assert json.loads(gzip.decompress(path.read_bytes()))["families"]
    real = versions.library_version
    monkeypatch.setattr(versions, "library_version", lambda dist: "9.9.9" if dist == "timm" else real(dist))
    arch_index.clear_memory()
    assert set(arch_index.timm_families()) == set(FAMILIES)
    assert (cache / "arch_index" / "timm-9.9.9" / "families.json.gz").is_file() and path.is_file()


def test_background_build_prepares_the_first_query(monkeypatch):
    monkeypatch.setattr(arch_index, "_BACKGROUND", {})
    thread = arch_index.start_background_build()
    assert arch_index.start_background_build() is thread
    thread.join(120)
    assert not thread.is_alive()
    st = arch_index.status()
    assert st["torchvision"] and st["contributions"] and st["timm_families"] == len(FAMILIES)
    assert st["timm_built"] == 0 and st["bytes"] > 0


def test_cli_index_rebuilds_and_reports(cache, capsys):
    assert cli.main(["index"]) == 0
    assert "torchvision not built" in capsys.readouterr().out
    assert cli.main(["index", "--rebuild"]) == 0
    out = capsys.readouterr().out
    assert "indexed 3 torchvision" in out and f"{len(FAMILIES)} of {len(FAMILIES)} families built" in out
    assert "index" in cli.COMMANDS


def test_every_name_stem_of_a_family_is_represented(cache, monkeypatch):
    """timm's ``regnet`` module holds regnetv (pre-activation), regnetx and regnety (squeeze-excitation) models:
    a regnety_002 state_dict saved from DataParallel opened as weights only when regnetv_040 alone stood for them."""
    monkeypatch.setattr(timm, "list_modules", lambda: ["regnet", "resnet"])
    arch_index.clear_memory()
    sd = {"module." + k: v for k, v in _timm_sd("regnety_002").items()}
    assert arch_index.pick_families(_variants(sd))[0] == ("regnet", 1.0)
    ranking = detect_architecture(sd, top_k=3)
    assert ranking[0].spec.name == "timm/regnety_002" and ranking[0].score == 1.0
