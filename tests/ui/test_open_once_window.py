"""The window's File > Open reads the file once and walks straight through the modules.

Two counts on ``FileActions.open_path`` with prompts answering:

* the file is opened at most twice (a sniff of its first bytes and one read),
  questions and answers included (``sys.addaudithook`` on ``open`` events of
  that path, :mod:`tests.core.model.open_counting`; before the formats package
  and the answer policy: 6 through ``workbench inspect``, 3 through the core);
* no module of workbench is entered more than three times on the open path.

How entries are counted (``sys.setprofile``): a *stop* is a ``call`` event into
a function of a ``workbench`` module M, made from another ``workbench`` module,
while no frame of M is active (a visit: M's own calls and callbacks into M from
code M called -- torch calling back into ``meta_build``'s TorchFunctionMode --
belong to the visit that is already under way). Dunder methods (``__init__``,
``__eq__``) and methods of data classes (``LoadReport.ok``, ``ArchSpec.with_kwargs``:
``self`` is a dataclass instance) handle data and are not stops. The
ranking of architectures (``detection.detect_architecture``) is one stop of
``detection``: what it calls for each candidate it verifies (``meta_build``,
``contrib``, ``arch_index``) is its own loop, not the file's path coming back.
The open path is ``FileActions._open``: the answer policy and the NaN/Inf check,
until the model is handed to the session (showing it -- the tree rows, the
graph -- is the display's work, not the open's). :data:`KNOWN` names the
modules allowed more stops, each with its reason. ``run_in_background`` runs
each step on the calling thread here, so the profile sees it (a profile
function is per thread).
"""

from __future__ import annotations

import collections
import dataclasses
import sys

import torch
import torchvision

from tests.core.model.open_counting import count_opens
from tests.ui.helpers import RecordingPrompts
from workbench.ui import file_actions

MAX_OPENS = 2
MAX_ENTRIES = 3
RANKING = "workbench.core.model.detection"
#: Modules allowed more than MAX_ENTRIES stops, and why (none: a partial-fit answer loads into the module
#: the strict attempt built, so contrib's builder is resolved and called once).
KNOWN: dict[str, int] = {}


def _module(frame) -> str:
    return frame.f_globals.get("__name__", "") if frame is not None else ""


class _Stops:
    """Counts the stops (see the module docstring) per module while it is the profile function."""

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()
        self.active: collections.Counter = collections.Counter()

    def __call__(self, frame, event, arg):
        module = _module(frame)
        if not module.startswith("workbench."):
            return
        if event == "call":
            name = frame.f_code.co_name
            dunder = name.startswith("__") and name.endswith("__")
            dunder = dunder or dataclasses.is_dataclass(frame.f_locals.get("self"))  # a data class's method
            caller = _module(frame.f_back)
            if (not self.active[module] and not dunder and caller.startswith("workbench.")
                    and not (self.active[RANKING] and module != RANKING)):
                self.counts[module] += 1
            self.active[module] += 1
        elif event == "return":
            self.active[module] -= 1


def _profiled(monkeypatch, stops: _Stops) -> None:
    real = file_actions.FileActions._open

    def _open(self, *args, **kwargs):
        sys.setprofile(stops)
        try:
            return real(self, *args, **kwargs)
        finally:
            sys.setprofile(None)

    monkeypatch.setattr(file_actions, "run_in_background", lambda fn, *a, **k: fn())
    monkeypatch.setattr(file_actions.FileActions, "_open", _open)


def test_a_state_dict_opens_with_two_reads_and_few_stops(qtbot, tmp_path, monkeypatch):
    """A bare state_dict whose detected match is unique opens with no question."""
    from workbench.ui.main_window import MainWindow

    path = tmp_path / "r18_3.pt"
    torch.save(torchvision.models.resnet18(num_classes=3).state_dict(), path)
    win = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(win)
    stops = _Stops()
    _profiled(monkeypatch, stops)
    with count_opens(path) as opened:
        assert win.file_actions.open_path(path)
    assert win.prompts.asked == [] and not win.prompts.errors
    assert win.model.fc.out_features == 3
    assert opened.count <= MAX_OPENS, opened.count
    over = {m: c for m, c in stops.counts.items() if c > KNOWN.get(m, MAX_ENTRIES)}
    assert over == {}, over


def test_questions_and_answers_read_the_file_once(qtbot, tmp_path, monkeypatch):
    """An architecture question, then a partial fit, answered in the window: still one read."""
    from workbench.core.model.spec import ArchSpec
    from workbench.ui.main_window import MainWindow

    path = tmp_path / "digits_wide.pt"
    model = torchvision.models.resnet18(num_classes=10)
    del model.fc  # no head: no candidate matches every key, so the window asks
    torch.save(model.state_dict(), path)
    win = MainWindow(prompts=RecordingPrompts(architecture=lambda c, n: ArchSpec("resnet18"), partial_load=True))
    qtbot.addWidget(win)
    stops = _Stops()
    _profiled(monkeypatch, stops)
    with count_opens(path) as opened:
        assert win.file_actions.open_path(path)
    assert [q[0] for q in win.prompts.asked] == ["architecture", "partial_load"]
    assert opened.count <= MAX_OPENS, opened.count
    assert win.session.input_shape == (1, 3, 224, 224)  # the example input came with the model, from core
    over = {m: c for m, c in stops.counts.items() if c > KNOWN.get(m, MAX_ENTRIES)}
    assert over == {}, over
