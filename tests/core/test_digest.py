"""Digests of a payload's tensors (workbench.core.digest), in memory: paths, hashes computed independently, and
every status :func:`check_digest` gives. Files on disk are tested in tests/core/model/formats/test_intact.py."""

from __future__ import annotations

import hashlib

import pytest
import torch
import xxhash

from workbench.core.digest import (
    ALGORITHM,
    DIGEST_KEY,
    MAX_DEPTH,
    DigestError,
    add_digest,
    check_digest,
    has_digest,
    tensor_digests,
)


def payload() -> dict:
    g = torch.Generator().manual_seed(0)
    return {"model_state_dict": {"fc.weight": torch.randn(2, 32, generator=g), "fc.bias": torch.zeros(2)},
            "optimizer_state_dict": {"state": {0: {"exp_avg": torch.ones(2, 32)}}, "param_groups": [{"lr": 0.1}]},
            "history": [torch.arange(5), (torch.tensor(1.5), "note")], "epoch": 3}


def test_every_tensor_is_found_by_its_path_and_hashed_as_its_bytes():
    data = payload()
    digests = tensor_digests(data)
    assert set(digests) == {"model_state_dict/fc.weight", "model_state_dict/fc.bias",
                            "optimizer_state_dict/state/0/exp_avg", "history/0", "history/1/0"}
    w = data["model_state_dict"]["fc.weight"]
    assert digests["model_state_dict/fc.weight"] == xxhash.xxh3_128_hexdigest(w.numpy().tobytes())
    assert digests["history/0"] == xxhash.xxh3_128_hexdigest(torch.arange(5).numpy().tobytes())
    sha = tensor_digests(data, "sha256")
    assert sha["model_state_dict/fc.bias"] == hashlib.sha256(bytes(4 * 2)).hexdigest()  # two float32 zeros
    with pytest.raises(KeyError):
        tensor_digests(data, "md5")


def test_a_view_is_hashed_as_its_whole_storage_and_tensors_without_one_are_left_out():
    base = torch.arange(12, dtype=torch.float32)
    digests = tensor_digests({"view": base[3:7], "meta": torch.empty(3, device="meta"),
                              "sparse": torch.eye(3).to_sparse(), "alone": base.clone()})
    assert set(digests) == {"view", "alone"}
    assert digests["view"] == digests["alone"] == xxhash.xxh3_128_hexdigest(base.numpy().tobytes())
    assert tensor_digests(torch.ones(2)) == {"": xxhash.xxh3_128_hexdigest(torch.ones(2).numpy().tobytes())}
    assert tensor_digests({"a": 1, "b": ["x"]}) == {}


def test_add_digest_copies_the_payload_and_replaces_an_old_digest():
    data = payload()
    out = add_digest(data)
    assert DIGEST_KEY not in data and has_digest(out) and not has_digest(data) and not has_digest([1])
    assert out["model_state_dict"] is data["model_state_dict"]  # shallow: the same objects
    entry = out[DIGEST_KEY]
    assert (entry["format"], entry["algorithm"]) == (1, ALGORITHM)
    assert entry["tensors"] == tensor_digests(data)
    again = add_digest(out, "sha256")  # the old entry is neither kept nor hashed
    assert again[DIGEST_KEY]["algorithm"] == "sha256" and set(again[DIGEST_KEY]["tensors"]) == set(entry["tensors"])
    assert tensor_digests(out) == tensor_digests(data)


def test_check_digest_is_ok_then_names_each_tensor_that_changed_went_missing_or_was_added():
    data = add_digest(payload())
    check = check_digest(data)
    assert (check.status, check.ok, check.bad, check.algorithm) == ("ok", True, [], "xxh3_128")
    data["model_state_dict"]["fc.bias"][1] = 1e-9
    del data["optimizer_state_dict"]["state"][0]
    data["extra"] = torch.ones(1)
    check = check_digest(data)
    assert check.status == "mismatch" and not check.ok
    assert check.bad == ["extra", "model_state_dict/fc.bias", "optimizer_state_dict/state/0/exp_avg"]


def test_no_digest_and_a_later_digest_are_not_errors():
    assert check_digest({"w": torch.ones(1)}).status == "absent"
    assert check_digest(torch.ones(1)).status == "absent"
    data = add_digest(payload())
    later = {**data, DIGEST_KEY: {**data[DIGEST_KEY], "format": 2}}
    assert (check_digest(later).status, check_digest(later).algorithm) == ("unknown", "xxh3_128")
    other = {**data, DIGEST_KEY: {**data[DIGEST_KEY], "algorithm": "blake9"}}
    assert (check_digest(other).status, check_digest(other).algorithm) == ("unknown", "blake9")


@pytest.mark.parametrize("entry, reason", [
    ("garbage", "the entry is str 'garbage', not a dict"),
    ({"format": "1", "algorithm": "xxh3_128", "tensors": {}}, "its format is str '1', not an integer"),
    ({"format": 0, "algorithm": "xxh3_128", "tensors": {}}, "its format 0 was never written"),
    ({"format": 1, "algorithm": ["x"], "tensors": {}}, "its algorithm is list ['x'], not a name"),
    ({"format": 1, "algorithm": "xxh3_128", "tensors": torch.ones(2)},
     "its tensors entry is a tensor of shape (2,), not a dict"),
    ({"format": 1, "algorithm": "xxh3_128", "tensors": {1: "ab"}},
     "its tensors entry maps int 1 to str 'ab', not a path to a hex digest"),
])
def test_a_malformed_entry_says_what_is_wrong_in_words(entry, reason):
    check = check_digest({"w": torch.ones(1), DIGEST_KEY: entry})
    assert (check.status, check.reason, check.bad) == ("malformed", reason, ["<digest entry>"])


def test_a_payload_that_holds_itself_or_nests_too_deep_is_malformed_not_a_crash():
    loop: list = [torch.ones(1)]
    loop.append(loop)
    entry = {"format": 1, "algorithm": "xxh3_128", "tensors": {"0": "ab"}}
    check = check_digest({"loop": loop, DIGEST_KEY: entry})
    assert (check.status, check.reason) == ("malformed", "a container of its data holds itself")
    with pytest.raises(DigestError, match="holds itself"):
        tensor_digests(loop)
    deep: list = [torch.ones(1)]
    for _ in range(MAX_DEPTH + 1):
        deep = [deep]
    check = check_digest({"deep": deep, DIGEST_KEY: entry})
    assert check.status == "malformed" and f"nested more than {MAX_DEPTH:,} levels deep" in check.reason


def test_paths_longer_than_allowed_are_refused_before_any_hashing():
    shared = {"weight": torch.ones(1)}
    fan = {f"layer{i}": shared for i in range(100)}  # one tensor reached by 100 paths
    assert len(tensor_digests(fan)) == 100
    chars = sum(len(f"layer{i}/weight") for i in range(100))
    assert len(tensor_digests(fan, max_path_chars=chars)) == 100
    with pytest.raises(DigestError, match=rf"^its 100 tensor paths are {chars:,} characters long in all, more than "
                                          rf"its digest lists \({chars - 1:,}\)$"):
        tensor_digests(fan, max_path_chars=chars - 1)
