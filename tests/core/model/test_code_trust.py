"""Code named by a file runs only after trust: every command-line and core route.

Each file here names code that leaves a marker file when it is imported or
called. Opened without trust, the marker must stay absent and the answer must
be the trust question (``TrustRequired``) or the ``--trust`` message; with trust
the model loads as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from workbench import cli
from workbench.core.errors import ArchitectureError, TrustRequired
from workbench.core.model.spec import ArchSpec
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.opening import open_model
from workbench.core.train.config import DataConfig, ModelConfig, TrainConfig
from workbench.core.train.launch.headless import model_from_config, train_from_toml

FACTORY_SOURCE = """\
from pathlib import Path
from torch import nn
Path({imported!r}).write_text("imported")

def make(width=4):
    Path({called!r}).write_text("called")
    return nn.Linear(2, width)
"""


class Evil:
    """A folder holding ``evil.py`` (marks on import and on call) and checkpoints naming it."""

    def __init__(self, root: Path):
        self.root = root
        self.imported = root / "IMPORTED"
        self.called = root / "CALLED"
        self.pwned = root / "PWNED"
        src = root / "src"
        src.mkdir()
        (src / "evil.py").write_text(FACTORY_SOURCE.format(imported=str(self.imported), called=str(self.called)))
        weights = nn.Linear(2, 4).state_dict()
        self.factory_pt = src / "factory.pt"
        torch.save({"model_state_dict": weights, "arch": {"name": "evil.py:make", "kwargs": {"width": 4}}},
                   self.factory_pt)
        self.system_pt = src / "system.pt"
        torch.save({"model_state_dict": {"w": torch.zeros(2)},
                    "arch": {"name": "os:system", "kwargs": {"command": f"touch {self.pwned}"}}}, self.system_pt)
        self.factory_st = src / "factory.safetensors"
        save_file(weights, str(self.factory_st),
                  metadata={"arch": json.dumps({"name": "evil.py:make", "kwargs": {"width": 4}})})

    def nothing_ran(self) -> bool:
        return not (self.imported.exists() or self.called.exists() or self.pwned.exists())


@pytest.fixture
def evil(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a helper in the current folder must never be what runs
    return Evil(tmp_path)


@pytest.mark.parametrize("which", ["factory_pt", "system_pt", "factory_st"])
def test_open_model_asks_before_running_a_files_code(evil, which):
    path = getattr(evil, which)
    with pytest.raises(TrustRequired) as info:
        open_model(path)
    assert info.value.kind == "code" and str(path) in str(info.value)
    assert info.value.globals == ["os:system" if which == "system_pt" else "evil.py:make"]
    assert evil.nothing_ran()
    with pytest.raises(TrustRequired):  # weights_only does not change the question
        open_model(path, weights_only=True)
    assert evil.nothing_ran()


def test_trusted_factory_resolves_next_to_the_file_not_the_current_folder(evil, tmp_path):
    decoy = tmp_path / "evil.py"  # the current folder holds a different evil.py
    decoy.write_text(f"from pathlib import Path\nPath({str(tmp_path / 'DECOY')!r}).write_text('x')\n"
                     "def make(width=4):\n    raise RuntimeError('the decoy ran')\n")
    opened = open_model(evil.factory_pt, trust=True)
    assert isinstance(opened.model, nn.Linear) and opened.model.out_features == 4
    assert evil.called.exists() and not (tmp_path / "DECOY").exists()
    assert opened.spec.to_dict()["name"] == f"{evil.factory_pt.parent / 'evil.py'}:make"  # recorded absolute
    st = open_model(evil.factory_st, trust=True)
    assert torch.equal(st.model.weight, opened.model.weight)


def test_a_spec_the_user_gives_needs_no_second_question(evil):
    spec = ArchSpec(f"{evil.factory_pt.parent / 'evil.py'}:make", {"width": 4})
    opened = open_model(evil.factory_pt, spec)  # --arch / the window's field: the user's own decision
    assert opened.model.out_features == 4 and evil.called.exists()


def test_registered_architectures_open_without_asking(tmp_path):
    path = tmp_path / "digits.pt"
    torch.save({"model_state_dict": DigitsCNN().state_dict(), "arch": {"name": "digits_cnn", "kwargs": {}}}, path)
    assert isinstance(open_model(path).model, DigitsCNN)


@pytest.mark.parametrize("kwargs, words", [
    ({"weights": "IMAGENET1K_V1"}, "download"),
    ({"num_classes": {"nested": [1, 2.0, None]}, "norm": object()}, "plain"),
])
def test_file_kwargs_are_plain_data_that_never_download(tmp_path, kwargs, words):
    with pytest.raises(ArchitectureError, match=words):
        ArchSpec.from_file({"name": "resnet18", "kwargs": kwargs}, tmp_path / "a.pt")


def test_cli_inspect_and_diff_refuse_without_trust(evil, capsys):
    for argv in (["inspect", str(evil.system_pt)], ["inspect", str(evil.factory_st)],
                 ["diff", str(evil.factory_pt), str(evil.factory_pt)]):
        assert cli.main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "--trust" in err and len(err.strip().splitlines()) == 1, err
        assert evil.nothing_ran()
    assert cli.main(["inspect", str(evil.factory_pt), "--trust"]) == 0
    assert "Linear" in capsys.readouterr().out and evil.called.exists()


def _run_file(tmp_path: Path, model: ModelConfig, name: str = "run.toml") -> Path:
    cfg = TrainConfig(data=DataConfig(dataset="digits", batch_size=128), epochs=1, tensorboard=False,
                      run_dir=str(tmp_path / "out"), model=model)
    path = tmp_path / "runs" / name
    path.parent.mkdir(exist_ok=True)
    cfg.to_toml(path)
    return path


def test_workbench_train_and_lr_find_refuse_a_run_file_naming_code(evil, tmp_path, capsys):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "evil.py").write_text((evil.root / "src" / "evil.py").read_text())
    named = _run_file(tmp_path, ModelConfig(arch="evil.py:make"))
    via_init = _run_file(tmp_path, ModelConfig(arch="", init=str(evil.factory_pt)), "init.toml")
    resume = _run_file(tmp_path, ModelConfig(arch="", checkpoint=str(evil.factory_pt), resume=True), "resume.toml")
    for path in (named, via_init, resume):
        for argv in (["train", str(path)], ["lr-find", str(path)], ["train", str(path), "--nproc-per-node", "2"]):
            assert cli.main(argv) == 1, argv
            captured = capsys.readouterr()
            text = captured.out + captured.err
            assert "error: " in text and "--trust" in text and "Traceback" not in text, text
            assert evil.nothing_ran(), argv


def test_run_file_factories_resolve_next_to_the_run_file_with_trust(evil, tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "evil.py").write_text((evil.root / "src" / "evil.py").read_text())
    path = _run_file(tmp_path, ModelConfig(arch="evil.py:make", kwargs={"width": 3}))
    with pytest.raises(TrustRequired):
        model_from_config(TrainConfig.from_toml(path).model, path.parent, origin=path)
    model, spec = model_from_config(TrainConfig.from_toml(path).model, path.parent, trust=True, origin=path)
    assert model.out_features == 3 and evil.called.exists()
    assert spec.to_dict()["name"] == f"{tmp_path / 'runs' / 'evil.py'}:make"


def test_train_with_trust_runs_the_named_factory(tmp_path):
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "tiny.py").write_text(
        "from workbench.core.model.demo import DigitsCNN\n\ndef make():\n    return DigitsCNN()\n")
    path = _run_file(tmp_path, ModelConfig(arch="tiny.py:make"))
    lines: list[str] = []
    assert train_from_toml(path, out=lines.append) == 1 and any("--trust" in ln for ln in lines)
    lines.clear()
    assert train_from_toml(path, out=lines.append, trust=True) == 0, lines
    recorded = read_checkpoint(tmp_path / "out" / "init.pt").metadata.arch
    assert recorded["name"] == f"{tmp_path / 'runs' / 'tiny.py'}:make"


def test_a_trusted_factory_may_take_its_own_pretrained_argument(evil):
    src = evil.root / "src"
    (src / "own.py").write_text("from torch import nn\n\ndef make(pretrained=False):\n    return nn.Linear(2, 4)\n")
    path = src / "own.pt"
    torch.save({"model_state_dict": nn.Linear(2, 4).state_dict(),
                "arch": {"name": "own.py:make", "kwargs": {"pretrained": True}}}, path)
    assert open_model(path, trust=True).model.out_features == 4  # its own meaning, not a torchvision download


def test_file_text_reaches_the_terminal_escaped(tmp_path, capsys):
    path = tmp_path / "esc.pt"
    torch.save({"model_state_dict": {"w": torch.zeros(2)},
                "arch": {"name": "\x1b]0;PWNED\x07\x1b[2J:x", "kwargs": {}}}, path)
    assert cli.main(["inspect", str(path)]) == 1
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\\x1b]0;PWNED" in err
    keys = tmp_path / "keys.pt"
    torch.save({"b\x1b]52;c;SGVsbG8=\x07.w": torch.zeros(2)}, keys)
    for argv in (["inspect", str(keys)], ["diff", str(keys), str(keys)]):
        cli.main(argv)
        captured = capsys.readouterr()
        assert "\x1b" not in captured.out + captured.err and "\x07" not in captured.out + captured.err


@pytest.mark.parametrize("edits, words", [
    ([{"op": "replace_head"}], "'path' must be"),
    (["x"], "must be a table"),
    ([{"op": "replace_head", "path": "fc", "num_outputs": "abc"}], "'num_outputs' must be"),
    ([{"op": "drop_table"}], "unknown model edit"),
])
def test_run_file_model_edits_are_checked_before_the_model_is_touched(tmp_path, capsys, edits, words):
    path = _run_file(tmp_path, ModelConfig(arch="digits_cnn", edits=edits))
    assert cli.main(["train", str(path)]) == 1
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if ln.startswith("error: ")]
    assert "[model] edits, entry 1" in line and words in line and "Traceback" not in out
