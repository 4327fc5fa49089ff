"""The ``workbench`` command's dispatch: --version, --help, a command, the window, an unknown word."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import torch

from workbench import cli

REPO = Path(__file__).resolve().parents[2]


def test_version(capsys):
    import workbench

    assert cli.main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"workbench {workbench.__version__} (torch {torch.__version__}")


def test_dispatch_train_and_gui(monkeypatch):
    calls = []
    training = types.ModuleType("workbench.core.train.launch.headless")
    training.train_from_toml = lambda path, out=print, trust=False, debug=False, callbacks=(): \
        calls.append(("train", path, [type(c).__name__ for c in callbacks])) or 0
    from workbench.ui.app import build_parser

    app = types.ModuleType("workbench.ui.app")
    app.main = lambda argv: calls.append(("gui", argv)) or 0
    app.build_parser = build_parser
    monkeypatch.setitem(sys.modules, "workbench.core.train.launch.headless", training)
    monkeypatch.setitem(sys.modules, "workbench.ui.app", app)
    assert cli.main(["train", "run.toml"]) == 0
    assert cli.main(["model.pt", "--arch", "resnet18"]) == 0
    assert cli.main([]) == 0
    assert calls == [("train", "run.toml", ["TrainerAttach"]), ("gui", ["model.pt", "--arch", "resnet18"]), ("gui", [])]


COMMAND_NAMES = ("inspect", "train", "lr-find", "diff", "runs", "contributions")


def test_help_lists_every_subcommand_with_one_line_each():
    """``workbench --help`` printed only the window's options before: no subcommand at all."""
    proc = subprocess.run([sys.executable, "-m", "workbench", "--help"], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    for name in COMMAND_NAMES:
        mine = [line for line in lines if line.strip().startswith(f"workbench {name} ")]
        assert len(mine) == 1, (name, mine)
        assert len(mine[0].split(None, 3)[-1]) > 20  # a line that says what it does
    assert sum(line.strip().startswith("workbench [PATH]") for line in lines) == 1  # the window's own form
    assert "--screenshot" in proc.stdout and "--in-process" in proc.stdout  # and the window's options
    probe = subprocess.run([sys.executable, "-c", "import sys; from workbench import cli; cli.main(['-h']); "
                                                  "print('PySide6' in sys.modules, 'torch' in sys.modules)"],
                           capture_output=True, text=True, cwd=REPO, timeout=120)
    assert probe.stdout.splitlines()[-1] == "False False"  # help is instant: neither Qt nor torch


def _gui_stub(monkeypatch):
    from workbench.ui.app import build_parser

    calls = []
    app = types.ModuleType("workbench.ui.app")
    app.main = lambda argv: calls.append(argv) or 0
    app.build_parser = build_parser
    monkeypatch.setitem(sys.modules, "workbench.ui.app", app)
    return calls


def test_an_unknown_command_word_is_a_usage_error_and_opens_no_window(monkeypatch, capsys, tmp_path):
    """``workbench foo`` tried to open a file named foo (the window, then its error box)."""
    calls = _gui_stub(monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["foo"]) == 2
    out, err = capsys.readouterr()
    assert err == "error: no such file or command: foo; commands: inspect, train, lr-find, diff, runs, contributions, index, graph, export, submit, pull, cancel, attach, remote\n"
    assert out == "" and calls == []
    assert cli.main(["--trust", "lr_find"]) == 2  # after options too; a near miss is named
    assert capsys.readouterr().err.rstrip().endswith("did you mean lr-find?")
    assert calls == []
    # a file of that name is opened; so is anything path-like (the window says what is wrong with it)
    (tmp_path / "foo").write_bytes(b"")
    assert cli.main(["foo"]) == 0
    assert cli.main(["missing.pt"]) == 0 and cli.main(["./bar"]) == 0 and cli.main(["--arch", "resnet18"]) == 0
    assert calls == [["foo"], ["missing.pt"], ["./bar"], ["--arch", "resnet18"]]


def test_an_unknown_command_in_a_subprocess_exits_2_without_a_window(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "workbench", "frobnicate"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: no such file or command: frobnicate; commands: inspect, train, lr-find, diff, runs, contributions, index, graph, export, submit, pull, cancel, attach, remote"]


def test_the_window_without_qt_is_one_line_and_exit_1(tmp_path):
    """A server install (no PySide6): plain ``workbench`` says what to install, not a traceback."""
    import subprocess
    import sys

    blocker = tmp_path / "PySide6"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('no Qt here', name='PySide6')\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path), "QT_QPA_PLATFORM": "offscreen"}
    out = subprocess.run([sys.executable, "-m", "workbench"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs PySide6" in lines[0] and "Traceback" not in out.stderr, out.stderr
