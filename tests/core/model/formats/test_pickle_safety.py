"""Bad input never crashes, hangs or runs code: it ends in the project's own errors."""

from __future__ import annotations

import io
import json
import random
import struct
import zipfile

import pytest
import torch

from tests.core.model.checkpoint_files import save_malicious, save_safetensors, save_state_dict
from workbench.core.errors import ArchitectureError, CheckpointError, TrustRequired
from workbench.core.model.loading import load_model
from workbench.core.model.checkpoint import Checkpoint
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.formats.pickle_safety import pickle_globals, unsafe_globals
from workbench.core.model.demo import DigitsCNN


def assert_clear_error(path, *words, trust=False):
    """read_checkpoint raises CheckpointError naming the file and each word (case-insensitive)."""
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(path, trust=trust)
    text = str(info.value)
    assert str(path) in text
    for word in words:
        assert word.lower() in text.lower(), text
    return info.value


@pytest.fixture
def digits_file(tmp_path):
    torch.manual_seed(0)
    return save_state_dict(DigitsCNN(), tmp_path / "digits.pt")


def test_missing_file(tmp_path):
    assert_clear_error(tmp_path / "nope.pt", "not found", "path")


def test_directory(tmp_path):
    assert_clear_error(tmp_path, "directory", "choose")


def test_empty_file(tmp_path):
    path = tmp_path / "empty.pt"
    path.write_bytes(b"")
    assert_clear_error(path, "empty", "save it again")


def test_random_bytes(tmp_path):
    path = tmp_path / "noise.pth"
    path.write_bytes(random.Random(1).randbytes(4096))
    assert_clear_error(path, "not a pytorch checkpoint")


def test_text_file(tmp_path):
    path = tmp_path / "notes.ckpt"
    path.write_text("hello, this is not a model\n")
    assert_clear_error(path, "not a pytorch checkpoint")


def test_truncated_zip(digits_file):
    data = digits_file.read_bytes()
    digits_file.write_bytes(data[: len(data) // 2])
    assert_clear_error(digits_file, "damaged", "copied completely")


def test_corrupted_data_pkl(digits_file, tmp_path):
    src = zipfile.ZipFile(digits_file)
    out = tmp_path / "corrupt.pt"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("data.pkl"):
                data = data[:10] + b"\xfe\xfd garbage \x00" + data[30:]
            dst.writestr(info, data)
    assert_clear_error(out, "damaged")


def test_bad_safetensors_header(tmp_path):
    good = save_safetensors(torch.nn.Linear(3, 2), tmp_path / "good.safetensors")
    data = good.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    broken_json = tmp_path / "json.safetensors"
    broken_json.write_bytes(data[:8] + b"{" + b"x" * (n - 1) + data[8 + n:])
    assert_clear_error(broken_json, "safetensors")
    wrong_offsets = tmp_path / "offsets.safetensors"
    header = json.loads(data[8:8 + n])
    header["weight"]["data_offsets"] = [0, 10_000]
    raw = json.dumps(header).encode()
    wrong_offsets.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n:])
    assert_clear_error(wrong_offsets, "safetensors")
    huge = tmp_path / "huge.safetensors"
    huge.write_bytes(struct.pack("<Q", 2**62) + b"{}")
    assert_clear_error(huge, "not a pytorch checkpoint")


def test_dict_without_state_dict_and_non_dict(tmp_path):
    path = tmp_path / "config.pt"
    torch.save({"lr": 0.1, "name": "x"}, path)
    assert_clear_error(path, "without any state_dict", "'lr'")
    tensor = tmp_path / "tensor.pt"
    torch.save(torch.zeros(3), tensor)
    assert_clear_error(tensor, "holds a Tensor")


@pytest.mark.parametrize("legacy", [False, True])
def test_pickle_that_runs_a_command_is_refused(tmp_path, legacy):
    marker = tmp_path / "pwned"
    path = save_malicious(tmp_path / "evil.pt", marker, legacy=legacy)
    with pytest.raises(TrustRequired) as info:
        read_checkpoint(path)
    system = {"posix.system", "os.system", "nt.system"}
    assert system & set(info.value.globals), info.value.globals
    assert any(g in str(info.value) for g in system)
    assert "--trust" in str(info.value)
    assert system & set(unsafe_globals(path))
    assert not marker.exists()


def test_pickle_globals_scans_without_unpickling(tmp_path):
    marker = tmp_path / "pwned"
    path = save_malicious(tmp_path / "evil.pkl", marker, legacy=True)
    found = pickle_globals(path.read_bytes())
    assert {"posix.system", "os.system", "nt.system"} & set(found)
    assert pickle_globals(b"\x80\x04garbage") == []
    assert not marker.exists()


def test_wrong_architecture_and_shape_mismatch(digits_file):
    ckpt = read_checkpoint(digits_file)
    with pytest.raises(ArchitectureError) as info:
        load_model(ckpt, "resnet18")
    assert "missing" in str(info.value) and "unexpected" in str(info.value)
    with pytest.raises(ArchitectureError) as info:
        load_model(ckpt, "digits_cnn(num_classes=3)")
    assert "classifier.weight: expected (3, 64), found (10, 64)" in str(info.value)
    assert "strict=False" in str(info.value)


# --------------------------------------------------------------------------- fuzz


def _mutate(data: bytes, rng: random.Random) -> bytes:
    """One random damage: flipped bytes, a truncation, an inserted or zeroed run, or a swapped block."""
    buf = bytearray(data)
    kind = rng.randrange(5)
    if kind == 0:
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
    elif kind == 1:
        del buf[rng.randrange(1, len(buf)):]
    elif kind == 2:
        at = rng.randrange(len(buf))
        buf[at:at] = rng.randbytes(rng.randint(1, 64))
    elif kind == 3:
        at = rng.randrange(len(buf))
        buf[at:at + rng.randint(1, 256)] = bytes(min(256, len(buf) - at))
    else:
        a, b = sorted(rng.sample(range(len(buf)), 2))
        buf[a:b] = buf[a:b][::-1]
    return bytes(buf)


def _outcome(path) -> str:
    try:
        ckpt = read_checkpoint(path)
    except CheckpointError:
        return "checkpoint_error"
    assert isinstance(ckpt, Checkpoint)
    try:
        model, report = load_model(ckpt, "digits_cnn")
    except ArchitectureError:
        return "architecture_error"
    assert report.ok and isinstance(model, DigitsCNN)
    return "loaded"


@pytest.mark.parametrize("form", ["zip", "legacy", "safetensors"])
def test_fuzz_mutated_checkpoints(tmp_path, form):
    """Seeded byte mutations of a real DigitsCNN checkpoint: a model or our own error, nothing else."""
    torch.manual_seed(0)
    model = DigitsCNN()
    src = tmp_path / "src"
    if form == "safetensors":
        save_safetensors(model, src)
    else:
        save_state_dict(model, src, legacy=form == "legacy")
    data = src.read_bytes()
    # Mutations aimed at the pickle and the zip directory are the interesting ones.
    rng = random.Random(1234 + len(form))
    cases = {"zip": 240, "legacy": 80, "safetensors": 80}[form]
    outcomes: dict[str, int] = {}
    for i in range(cases):
        path = tmp_path / f"case{i}"
        path.write_bytes(_mutate(data, rng))
        result = _outcome(path)
        outcomes[result] = outcomes.get(result, 0) + 1
        path.unlink()
    assert sum(outcomes.values()) == cases
    assert outcomes.get("checkpoint_error", 0) > 0


def test_fuzz_mutations_of_the_pickle_only(tmp_path):
    """Damage only data.pkl inside a valid zip: the weights-only unpickler must refuse cleanly."""
    torch.manual_seed(0)
    src = save_state_dict(DigitsCNN(), tmp_path / "src.pt")
    with zipfile.ZipFile(src) as zf:
        records = [(info, zf.read(info)) for info in zf.infolist()]
    rng = random.Random(99)
    outcomes: dict[str, int] = {}
    for i in range(60):
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as dst:
            for info, data in records:
                dst.writestr(info, _mutate(data, rng) if info.filename.endswith("data.pkl") else data)
        path = tmp_path / f"pkl{i}.pt"
        path.write_bytes(buf.getvalue())
        result = _outcome(path)
        outcomes[result] = outcomes.get(result, 0) + 1
    assert outcomes.get("checkpoint_error", 0) > 0
