"""Checkpoint digests: every file Workbench writes carries one; every read checks it.

A flipped bit inside a tensor record raises CheckpointCorrupt naming the newest
intact checkpoint of the folder; files without a digest open as before.
"""

from __future__ import annotations

import os
import time
import zipfile

import pytest
import torch

from tests.core.model.checkpoint_damage import flip_tensor_byte, largest_tensor_record, record_span
from tests.core.model.checkpoint_files import optimizer_for, save_training_dict
from workbench.core.digest import DIGEST_KEY, add_digest, check_digest, tensor_digests
from workbench.core.errors import CheckpointCorrupt, CheckpointError
from workbench.core.files import atomic_save
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.formats.intact import newest_intact, verify_checkpoint
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.saving import checkpoint_payload, save_checkpoint


def payload(seed: int = 0, epoch: int = 1) -> dict:
    torch.manual_seed(seed)
    model = DigitsCNN()
    return checkpoint_payload(model, arch={"name": "digits_cnn", "kwargs": {}}, optimizer=optimizer_for(model),
                              epoch=epoch, step=10 * epoch, loss=0.5)


def save_at(path, data, mtime: float):
    """Save with a digest and set the file's modification time (s since the epoch)."""
    save_checkpoint(path, data)
    os.utime(path, (mtime, mtime))
    return path


def test_saved_file_carries_a_plain_digest_of_every_tensor(tmp_path):
    data = payload()
    path = save_checkpoint(tmp_path / "last.pt", data)
    raw = torch.load(path, weights_only=True)  # the digest entry is plain str/int/dict
    entry = raw[DIGEST_KEY]
    assert entry["algorithm"] == "xxh3_128" and entry["format"] == 1
    tensors = entry["tensors"]
    assert "model_state_dict/classifier.weight" in tensors
    assert any(k.startswith("optimizer_state_dict/state/") and k.endswith("/exp_avg") for k in tensors)
    assert any(k.startswith("rng_state/") for k in tensors)
    assert all(isinstance(v, str) and len(v) == 32 for v in tensors.values())
    assert check_digest(raw).ok
    ckpt = read_checkpoint(path)
    assert ckpt.metadata.verified is True
    assert DIGEST_KEY not in ckpt.raw  # raw is the payload as it was saved


def test_digest_of_tied_and_viewed_tensors_hashes_their_storage_once():
    w = torch.randn(4, 3)
    data = {"a": w, "b": w, "c": w[1:], "d": torch.randn(2)}
    d = tensor_digests(data)
    assert d["a"] == d["b"] == d["c"] != d["d"]


@pytest.mark.parametrize("mmap", [True, False])
def test_a_flipped_bit_in_a_tensor_record_is_caught(tmp_path, mmap):
    path = save_checkpoint(tmp_path / "last.pt", payload())
    assert read_checkpoint(path, mmap=mmap).metadata.verified
    flip_tensor_byte(path)
    assert torch.load(path, weights_only=True)  # torch itself loads the damaged file without a word
    with pytest.raises(CheckpointCorrupt) as info:
        read_checkpoint(path, mmap=mmap)
    err = info.value
    assert str(path) in str(err) and "is corrupt (digest mismatch)" in str(err)
    assert err.intact is None and "no intact checkpoint" in str(err)
    assert err.tensors and all("/" in t for t in err.tensors)
    assert verify_checkpoint(path).status == "mismatch"


def test_corrupt_optimizer_state_is_caught_too(tmp_path):
    """Damage each tensor record in turn until one belongs to the optimizer state alone."""
    path = save_checkpoint(tmp_path / "last.pt", payload())
    pristine = path.read_bytes()
    found = None
    for record in _tensor_records(path):
        if record_span(path, record)[1] < 8:
            continue
        flip_tensor_byte(path, record)
        bad = verify_checkpoint(path).bad
        if bad and all(b.startswith("optimizer_state_dict/state/") for b in bad):
            found = bad
            break
        path.write_bytes(pristine)
    assert found is not None
    with pytest.raises(CheckpointCorrupt) as info:
        read_checkpoint(path)
    assert info.value.tensors == found


def _tensor_records(path) -> list[str]:
    with zipfile.ZipFile(path) as zf:
        return [i.filename for i in zf.infolist() if "/data/" in i.filename and "serialization_id" not in i.filename]


def test_corrupt_last_names_the_newest_intact_checkpoint(tmp_path):
    now = time.time()
    init = save_at(tmp_path / "init.pt", payload(epoch=0), now - 300)
    epoch1 = save_at(tmp_path / "epoch_1.pt", payload(epoch=1), now - 200)
    best = save_at(tmp_path / "best.pt", payload(epoch=2), now - 100)
    last = save_at(tmp_path / "last.pt", payload(epoch=3), now)
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    foreign = tmp_path / "foreign.pt"  # newer, but without a digest: it cannot be shown intact
    torch.save({"w": torch.zeros(3)}, foreign)
    os.utime(foreign, (now - 50, now - 50))
    flip_tensor_byte(last)

    with pytest.raises(CheckpointCorrupt) as info:
        read_checkpoint(last)
    assert info.value.intact == best
    assert str(info.value) == f"{last}: is corrupt (digest mismatch); best.pt is intact: open or resume from it instead."

    flip_tensor_byte(best)  # best.pt corrupt as well: the previous epoch's file is the newest intact one
    with pytest.raises(CheckpointCorrupt) as info:
        read_checkpoint(last)
    assert info.value.intact == epoch1
    assert newest_intact(best) == epoch1
    epoch1.unlink()
    assert newest_intact(last) == init


def test_files_without_a_digest_open_as_before(tmp_path):
    torch.manual_seed(0)
    model = DigitsCNN()
    foreign = save_training_dict(model, tmp_path / "foreign.pt")
    ckpt = read_checkpoint(foreign)
    assert ckpt.metadata.verified is None and ckpt.metadata.format == "training_dict"
    flip_tensor_byte(foreign)
    assert read_checkpoint(foreign).metadata.verified is None  # nothing to check it against
    bare = tmp_path / "bare.pt"
    save_checkpoint(bare, model.state_dict())  # a bare state_dict stays one: no digest entry added
    assert read_checkpoint(bare).metadata.format == "state_dict"
    undigested = save_checkpoint(tmp_path / "plain.pt", payload(), digest=False)
    assert DIGEST_KEY not in torch.load(undigested, weights_only=True)
    assert read_checkpoint(undigested).metadata.verified is None


def test_a_digest_of_a_later_format_opens_unverified(tmp_path):
    data = add_digest(payload())
    data[DIGEST_KEY] = {**data[DIGEST_KEY], "algorithm": "blake9"}
    path = tmp_path / "future.pt"
    torch.save(data, path)
    ckpt = read_checkpoint(path)
    assert ckpt.metadata.verified is None and DIGEST_KEY not in ckpt.raw


def test_a_damaged_digest_entry_is_corrupt(tmp_path):
    data = add_digest(payload())
    data[DIGEST_KEY] = "garbage"
    path = tmp_path / "last.pt"
    torch.save(data, path)
    with pytest.raises(CheckpointCorrupt):
        read_checkpoint(path)


def test_a_digest_that_lists_a_missing_tensor_is_corrupt(tmp_path):
    data = add_digest(payload())
    del data["model_state_dict"]["classifier.bias"]
    path = tmp_path / "last.pt"
    torch.save(data, path)
    with pytest.raises(CheckpointCorrupt) as info:
        read_checkpoint(path)
    assert info.value.tensors == ["model_state_dict/classifier.bias"]


def test_atomic_save_adds_the_digest_for_every_run_checkpoint_writer(tmp_path):
    path = atomic_save(payload(), tmp_path / "last.pt")
    assert check_digest(torch.load(path, weights_only=True)).ok
    raw = atomic_save({"w": torch.ones(2)}, tmp_path / "sd.pt")
    assert DIGEST_KEY not in torch.load(raw, weights_only=True)


def test_reserved_digest_key_cannot_come_from_extra():
    torch.manual_seed(0)
    with pytest.raises(ValueError, match="reserved"):
        checkpoint_payload(DigitsCNN(), extra={DIGEST_KEY: {}})


def test_corrupt_error_is_a_checkpoint_error(tmp_path):
    path = save_checkpoint(tmp_path / "last.pt", payload())
    flip_tensor_byte(path, largest_tensor_record(path))
    with pytest.raises(CheckpointError):
        read_checkpoint(path, mmap=False)


def test_only_a_checkpoint_of_the_same_model_is_named_intact(tmp_path):
    """A mixed folder (Downloads): newer digested checkpoints of other models are never offered."""
    from torch import nn

    from workbench.core.model.formats.intact import model_signature

    now = time.time()
    best = save_at(tmp_path / "best.pt", payload(epoch=2), now - 400)
    last = save_at(tmp_path / "last.pt", payload(epoch=3), now - 300)
    other = nn.Linear(4, 2)  # another model, with its own valid digest, saved later
    save_at(tmp_path / "linear.pt", checkpoint_payload(other, arch={"name": "linear", "kwargs": {}}), now - 200)
    same_arch_other_keys = payload(epoch=4)  # the same arch entry over another model's tensors
    same_arch_other_keys["model_state_dict"] = {"fc.weight": torch.zeros(2, 4)}
    save_at(tmp_path / "odd.pt", same_arch_other_keys, now - 150)
    other_kwargs = payload(epoch=5)  # the same tensors under another arch entry
    other_kwargs["arch"] = {"name": "digits_cnn", "kwargs": {"width": 2}}
    save_at(tmp_path / "kw.pt", other_kwargs, now - 120)
    reshaped = payload(epoch=6)  # the same keys, one of another shape
    reshaped["model_state_dict"]["classifier.bias"] = torch.zeros(11)
    save_at(tmp_path / "shape.pt", reshaped, now - 100)
    flip_tensor_byte(last)

    with pytest.raises(CheckpointCorrupt) as info:  # formerly shape.pt, the newest digested file of the folder
        read_checkpoint(last)
    assert info.value.intact == best
    assert newest_intact(last) == best
    flip_tensor_byte(best)
    with pytest.raises(CheckpointCorrupt) as info:
        read_checkpoint(last)
    assert info.value.intact is None and "no intact checkpoint" in str(info.value)
    sig = model_signature(torch.load(tmp_path / "kw.pt", weights_only=True))
    assert sig is not None and ("classifier.bias", (10,)) in sig[1]


def test_a_search_never_fails_on_a_neighbour(tmp_path, monkeypatch):
    """Whatever a candidate's check raises, the search passes over it."""
    from workbench.core.model.formats import intact

    now = time.time()
    best = save_at(tmp_path / "best.pt", payload(epoch=2), now - 300)
    newer = save_at(tmp_path / "epoch_3.pt", payload(epoch=3), now - 200)
    last = save_at(tmp_path / "last.pt", payload(epoch=4), now - 100)
    flip_tensor_byte(last)
    real = intact.check_digest

    def flaky(obj):
        if obj.get("epoch") == 3:
            raise RuntimeError("a bug in a check")
        return real(obj)

    monkeypatch.setattr(intact, "check_digest", flaky)
    assert newest_intact(last) == best != newer
