"""Checkpoints whose digest entry or metadata is malformed: one clear CheckpointError, never another exception.

Every case is a real file written with torch.save (or safetensors), read the way
the window and the CLI read it. The window catches WorkbenchError / ValueError /
OSError only, so anything else escaping read_checkpoint would be a crash.
"""

from __future__ import annotations

import json
import time

import pytest
import torch
from safetensors.torch import save_file

from tests.core.model.checkpoint_damage import nest_deep
from workbench.core.digest import DIGEST_KEY, MAX_DEPTH, add_digest, check_digest
from workbench.core.errors import ArchitectureError, CheckpointCorrupt, CheckpointError
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.formats.intact import verify_checkpoint
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.opening import open_model


def state_dict() -> dict:
    torch.manual_seed(0)
    return DigitsCNN().state_dict()


def digested() -> dict:
    return add_digest({"model_state_dict": state_dict(), "epoch": 1, "arch": {"name": "digits_cnn", "kwargs": {}}})


def with_entry(**changes) -> dict:
    payload = digested()
    payload[DIGEST_KEY] = {**payload[DIGEST_KEY], **changes}
    return payload


MALFORMED = {
    "algorithm_list": lambda: with_entry(algorithm=["x"]),
    "algorithm_dict": lambda: with_entry(algorithm={"a": 1}),
    "format_tensor": lambda: with_entry(format=torch.ones(3)),
    "format_list": lambda: with_entry(format=[1]),
    "format_bool": lambda: with_entry(format=True),
    "format_zero": lambda: with_entry(format=0),
    "tensors_list": lambda: with_entry(tensors=[1, 2]),
    "tensors_int_key": lambda: with_entry(tensors={1: "x", **digested()[DIGEST_KEY]["tensors"]}),
    "tensors_tensor_key": lambda: with_entry(tensors={torch.ones(1): "x"}),
    "tensors_tensor_values": lambda: with_entry(tensors={k: torch.ones(2) for k in digested()[DIGEST_KEY]["tensors"]}),
    "entry_str": lambda: {**digested(), DIGEST_KEY: "garbage"},
    "entry_none": lambda: {**digested(), DIGEST_KEY: None},
    "entry_tensor": lambda: {**digested(), DIGEST_KEY: torch.ones(3)},
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_digest_entry_is_one_clear_corrupt_error(tmp_path, case):
    path = tmp_path / f"{case}.pt"
    torch.save(MALFORMED[case](), path)
    with pytest.raises(CheckpointCorrupt) as info:  # formerly TypeError / RuntimeError for most of them
        read_checkpoint(path)
    assert isinstance(info.value, CheckpointError)  # what the window and the CLI report in one line
    assert "malformed digest: " in str(info.value) and str(path) in str(info.value)
    assert info.value.tensors == ["<digest entry>"]
    check = verify_checkpoint(path)
    assert check.status == "malformed" and check.reason and not check.ok


@pytest.mark.parametrize("entry", [{"format": 2, "algorithm": ["x"], "tensors": 5}, {"format": 1, "algorithm": "md5"}])
def test_a_later_format_or_unknown_algorithm_still_opens_unverified(tmp_path, entry):
    path = tmp_path / "later.pt"
    torch.save({**digested(), DIGEST_KEY: entry}, path)
    assert read_checkpoint(path).metadata.verified is None


def test_a_container_that_holds_itself_is_malformed_not_a_hang(tmp_path):
    loop: list = []
    loop.append(loop)
    payload = digested()
    payload["junk"] = loop
    path = tmp_path / "loop.pt"
    torch.save(payload, path)
    with pytest.raises(CheckpointCorrupt, match="holds itself"):
        read_checkpoint(path)


def test_shared_containers_are_walked_once_however_often_they_are_reached(tmp_path):
    """2**60 paths to one tensor through 60 shared lists (a few hundred bytes): refused at once, not walked."""
    t = torch.ones(3)
    chain: list = [t, t]
    for _ in range(60):
        chain = [chain, chain]
    payload = digested()
    payload["junk"] = chain
    path = tmp_path / "shared.pt"
    torch.save(payload, path)
    start = time.perf_counter()
    with pytest.raises(CheckpointCorrupt, match="tensor paths"):
        read_checkpoint(path)
    no_tensors: list = [1]
    for _ in range(60):
        no_tensors = [no_tensors, no_tensors]
    payload["junk"] = no_tensors  # no tensor below: never entered again, the digest verifies
    torch.save(payload, path)
    assert read_checkpoint(path).metadata.verified is True
    assert time.perf_counter() - start < 5


def test_deep_nesting_is_refused_in_linear_time(tmp_path):
    """A list nested 300,000 deep (600 KB): the digest walk took 11 s (quadratic paths); now refused at once."""
    deep = nest_deep(tmp_path / "deep.pt", digested(), "junk", 300_000)
    start = time.perf_counter()
    with pytest.raises(CheckpointCorrupt, match=f"nested more than {MAX_DEPTH:,} levels"):
        read_checkpoint(deep)
    assert time.perf_counter() - start < 5  # torch's own unpickling is most of it
    ok = nest_deep(tmp_path / "ok.pt", digested(), "junk", MAX_DEPTH - 10)  # below the cap: verifies
    assert read_checkpoint(ok).metadata.verified is True


def test_paths_at_every_level_of_a_deep_chain_stay_fast():
    """Tensors at every level of a 9,000-deep chain: each container's path is joined once."""
    payload = digested()
    node: list = []
    payload["junk"] = node
    for _ in range(9_000):
        child: list = [torch.zeros(1)]
        node.append(child)
        node = child
    start = time.perf_counter()
    assert check_digest(add_digest(payload)).ok
    assert time.perf_counter() - start < 10


# --------------------------------------------------------------------------- metadata


@pytest.mark.parametrize("kwargs", [[1, 2], 5, "abc", 0])
def test_non_table_arch_kwargs_read_and_are_refused_by_the_trust_rule(tmp_path, kwargs):
    sd = state_dict()
    pt = tmp_path / "model.pt"
    torch.save({"model_state_dict": sd, "arch": {"name": "digits_cnn", "kwargs": kwargs}}, pt)
    st = tmp_path / "model.safetensors"
    save_file(dict(sd), st, metadata={"arch": json.dumps({"name": "digits_cnn", "kwargs": kwargs})})
    for path in (pt, st):
        meta = read_checkpoint(path).metadata  # formerly TypeError / ValueError from dict(kwargs)
        assert meta.arch == {"name": "digits_cnn", "kwargs": kwargs}
        with pytest.raises(ArchitectureError, match="kwargs must be a table"):
            open_model(path)


def test_missing_or_null_kwargs_read_as_empty(tmp_path):
    path = tmp_path / "model.pt"
    torch.save({"model_state_dict": state_dict(), "arch": {"name": "digits_cnn", "kwargs": None}}, path)
    assert read_checkpoint(path).metadata.arch == {"name": "digits_cnn", "kwargs": {}}


@pytest.mark.parametrize("entry", [
    {"optimizer_state_dict": {"param_groups": 5}},
    {"optimizer_state_dict": {"param_groups": {"a": 1}}},
    {"optimizer_state_dict": {"param_groups": []}},
    {"optimizer_state_dict": {"param_groups": [torch.ones(3)]}},
    {"optimizer_state_dict": {"param_groups": [{"lr": 0.1, "decoupled_weight_decay": torch.ones(2),
                                                 torch.ones(1): 3}]}},
    {"optimizer_states": [{"param_groups": 7}], "global_step": 3},
    {"optimizer_states": [{"param_groups": [None]}], "global_step": 3},
])
def test_bad_optimizer_metadata_is_left_empty(tmp_path, entry):
    path = tmp_path / "model.pt"
    key = "state_dict" if "optimizer_states" in entry else "model_state_dict"
    torch.save({key: state_dict(), **entry}, path)
    meta = read_checkpoint(path).metadata  # formerly TypeError / KeyError 0
    assert meta.optimizer_class in (None, "SGD", "Adam", "AdamW")
    assert isinstance(meta.optimizer_hparams, dict)


def test_deep_or_huge_hyper_parameters_are_shown_bounded(tmp_path):
    path = tmp_path / "lightning.ckpt"
    deep: list = []
    node = deep
    for _ in range(100):  # deeper than PLAIN_MAX_DEPTH (torch.save itself recurses)
        node.append([])
        node = node[0]
    torch.save({"state_dict": state_dict(), "global_step": 1,
                "hyper_parameters": {"deep": deep, "big": torch.zeros(10_000), "small": torch.arange(3)}}, path)
    extra = read_checkpoint(path).metadata.extra["hyper_parameters"]
    assert extra["big"] == "tensor((10000,), float32)" and extra["small"] == [0, 1, 2]
    assert "..." in json.dumps(extra["deep"])


def test_deeply_nested_hyper_parameters_without_a_digest_read(tmp_path):
    """No digest to check: the walk that converts metadata is bounded on its own."""
    sd = state_dict()
    path = nest_deep(tmp_path / "deep.ckpt", {"state_dict": sd, "global_step": 1, "pytorch-lightning_version": "2"},
                     "hyper_parameters", 100_000)
    ckpt = read_checkpoint(path)
    assert ckpt.metadata.format == "lightning" and ckpt.metadata.verified is None
    assert "..." in json.dumps(ckpt.metadata.extra["hyper_parameters"])


def test_malformed_neighbours_never_break_the_search_for_an_intact_checkpoint(tmp_path):
    """All the malformed files in one folder with one good, older file: each read names the good one."""
    import os

    good = tmp_path / "good.pt"
    torch.save(digested(), good)
    os.utime(good, (time.time() - 3600, time.time() - 3600))
    for case, make in MALFORMED.items():
        torch.save(make(), tmp_path / f"{case}.pt")
    for case in MALFORMED:
        with pytest.raises(CheckpointCorrupt) as info:  # formerly the neighbours' TypeError escaped the search
            read_checkpoint(tmp_path / f"{case}.pt")
        assert info.value.intact == good, case
