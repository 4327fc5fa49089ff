"""The GUI entry point: ``workbench [PATH] [--arch NAME|SPEC] [--num-classes N] [--trust] [--in-process]
[--theme system|light|dark] [--screenshot OUT.png [--size WxH]]``."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

#: Window size used for ``--screenshot`` (pixels).
SCREENSHOT_SIZE = (1600, 960)
#: Milliseconds after the event loop starts before optional libraries' modeling code is imported ahead
#: (:mod:`workbench.core.warm_imports`; not with ``--attach``): the first paint and the window's start-up come first.
WARM_IMPORTS_AFTER_MS = 500
#: Seconds ``--screenshot`` waits at most for the memory estimate (the tree's Memory column, the fit line) to be
#: shown: it runs on a worker thread (``ui.memory_feed``), 0.05 s for the demo, a few seconds for a large model.
SCREENSHOT_MEMORY_WAIT_S = 20.0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the GUI command."""
    parser = argparse.ArgumentParser(prog="workbench", description="Open the Workbench desktop app.")
    parser.add_argument("path", nargs="?", help="checkpoint to open (default: the built-in demo model)")
    parser.add_argument("--arch", help='architecture, e.g. resnet18, "resnet18(num_classes=10)", pkg.mod:factory')
    parser.add_argument("--num-classes", type=int, help="num_classes for --arch")
    parser.add_argument("--trust", action="store_true", help="load pickled code in PATH without asking")
    parser.add_argument("--screenshot", metavar="OUT.png", help="render the window to a PNG and exit")
    width, height = SCREENSHOT_SIZE
    parser.add_argument("--size", metavar="WxH", type=_size, default=SCREENSHOT_SIZE,
                        help=f"window size of --screenshot, e.g. 1280x800 (default {width}x{height})")
    parser.add_argument("--theme", choices=("system", "light", "dark"),
                        help="colors for this session (View > Theme chooses the remembered one)")
    parser.add_argument("--in-process", action="store_true",
                        help="train on a thread of the window's process instead of a training process "
                             "(this session only; the Training panel has the same setting)")
    parser.add_argument("--freeze", metavar="PATH", action="append", default=[],
                        help="freeze a module before the screenshot ('' = everything); repeatable")
    parser.add_argument("--select", metavar="NAME", help="select a module in the tree (shows it in Details)")
    parser.add_argument("--attach", metavar="HOST:PORT",
                        help="attach to a training script that called workbench.attach (File > Attach to a "
                             "running script…); the token comes from its discovery file on this machine, or --token")
    parser.add_argument("--token", help="the attached script's token (printed by the script); or set "
                                        "WORKBENCH_ATTACH_TOKEN, which other users cannot read in ps")
    parser.add_argument("--unfreeze", metavar="PATH", action="append", default=[],
                        help="unfreeze a module (applied after --freeze); repeatable")
    return parser


def _size(text: str) -> tuple[int, int]:
    """``"1280x800"`` -> ``(1280, 800)`` (argparse type of ``--size``)."""
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, e.g. 1280x800, not {text!r}") from None
    if width < 200 or height < 200:
        raise argparse.ArgumentTypeError(f"{text}: too small (200x200 at least)")
    return width, height


def _arch_spec(args):
    if args.arch is None:
        return None
    from workbench.core.model.spec import ArchSpec

    extra = {} if args.num_classes is None else {"num_classes": args.num_classes}
    return ArchSpec.parse(args.arch, **extra)


def take_screenshot(window, out: str | Path, depth: int = 1, size: tuple[int, int] = SCREENSHOT_SIZE) -> Path:
    """Render ``window`` (shown, events processed, first levels expanded) to a PNG.

    Parameters
    ----------
    window : MainWindow
    out : str or Path
        Target file; its folder is created.
    depth : int
        Tree levels below the top-level modules to expand.
    size : (int, int)
        Window width and height, pixels.

    Returns
    -------
    Path
        The PNG written.
    """
    from PySide6.QtWidgets import QApplication

    window.resize(*size)
    window.show()
    window.tree_widget.expand_to_depth(depth)
    feed = getattr(window, "memory_feed", None)
    deadline = time.monotonic() + SCREENSHOT_MEMORY_WAIT_S
    while feed is not None and not feed.is_idle() and time.monotonic() < deadline:
        QApplication.processEvents()
        time.sleep(0.01)
    for _ in range(5):
        QApplication.processEvents()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not window.grab().save(str(out), "PNG"):
        raise OSError(f"could not write {out}")
    return out


def unattended_prompts():
    """Prompts that never block (for ``--screenshot``): errors go to stderr, the best detected
    architecture is taken (weights-only view below a 0.9 score), no trust, no partial load."""
    from workbench.ui.dialogs import WEIGHTS_ONLY
    from workbench.ui.prompts import Prompts

    class Unattended(Prompts):
        def error(self, message):
            print(message, file=sys.stderr)

        def architecture(self, candidates, file_name):
            return candidates[0].spec if candidates and candidates[0].score >= 0.9 else WEIGHTS_ONLY

        def trust(self, err):
            return False

        def open_intact(self, err):
            print(err, file=sys.stderr)
            return False

        def partial_load(self, report, file_name, spec):
            return False

    return Unattended()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the desktop app; returns the process exit code.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name; default ``sys.argv[1:]``.
    """
    from workbench.core.hub_offline import offline_by_default

    offline_by_default()  # before anything imports huggingface_hub; the training process inherits it
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.screenshot and not os.environ.get("WORKBENCH_SETTINGS_DIR"):
        # a screenshot shows the default layout and never writes the user's settings
        os.environ["WORKBENCH_SETTINGS_DIR"] = tempfile.mkdtemp(prefix="workbench-settings-")
    from PySide6.QtWidgets import QApplication

    from workbench.core.train.launch.in_thread import reserve_cores_for_workers
    from workbench.ui.qsettings import set_application_names

    reserve_cores_for_workers()  # the GUI thread computes single-threaded; training threads get the cores

    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "workbench"])
    set_application_names()
    from workbench.ui.wheel_guard import WheelGuard

    WheelGuard.install(app)  # the wheel scrolls the settings, never an unfocused field under the pointer
    from workbench.ui.threading import collect_garbage_on_gui_thread

    collect_garbage_on_gui_thread()  # a QObject must never be freed by a collection on a worker thread
    from workbench.ui.main_window import MainWindow

    if args.screenshot:
        os.environ.setdefault("WORKBENCH_START_AHEAD", "0")  # a screenshot trains nothing
    window = MainWindow(prompts=unattended_prompts() if args.screenshot else None)
    if args.in_process:
        window.training_panel.set_in_process(True, remember=False)
    if args.theme:
        window.theme.set_theme(args.theme, remember=False)
    from workbench.core.gc_freeze import freeze_startup_objects

    if args.screenshot:  # unattended: nothing asks, the file opens before the window is drawn
        if args.path and not window.open_path(args.path, arch=_arch_spec(args), trust=args.trust):
            return 1
        apply_tree_options(window, args)
        freeze_startup_objects()
        out = take_screenshot(window, args.screenshot, size=args.size)
        print(f"wrote {out}")
        window.close()
        return 0
    show_and_open(window, args)
    freeze_startup_objects()  # a full collection would otherwise stall the window ~250 ms
    if not args.attach:  # a window attached to a script shares its machine: no 2 s of imports beside it
        from PySide6.QtCore import QTimer

        from workbench.core import warm_imports

        # with the window up: transformers' modeling code (~2 s here), so that opening a Hugging Face
        # folder later takes its own time only (none without transformers; an open begun meanwhile waits)
        QTimer.singleShot(WARM_IMPORTS_AFTER_MS, warm_imports.start)
    return app.exec()


def show_and_open(window, args) -> None:
    """Show the window, then open ``args.path`` once it is painted (a dialog never appears on a black screen).

    The tree options (``--freeze``, ``--unfreeze``, ``--select``) apply after the file opened.
    """
    window.show()
    if getattr(args, "attach", None):
        from PySide6.QtCore import QTimer

        QTimer.singleShot(0, lambda: attach_from_args(window, args))  # once the window is painted
        return
    if not args.path:
        apply_tree_options(window, args)
        return
    window.open_when_shown(args.path, arch=_arch_spec(args), trust=args.trust,
                           then=lambda _opened: apply_tree_options(window, args))


def attach_from_args(window, args) -> bool:
    """``--attach HOST:PORT [--token T]``: attach the window; the token, when not given, from the script's
    discovery file with that address. False after saying why not."""
    from workbench.core.attach.discovery import list_waiting

    token = args.token or os.environ.get("WORKBENCH_ATTACH_TOKEN")  # (a --token shows in ps; the variable does not)
    if not token:
        def same(a: str, b: str) -> bool:  # localhost:5678 is 127.0.0.1:5678
            local = ("localhost", "127.0.0.1", "")
            (ha, _, pa), (hb, _, pb) = a.rpartition(":"), b.rpartition(":")
            return pa == pb and (ha == hb or (ha in local and hb in local))

        found = [i for i in list_waiting() if same(str(i.get("address", "")), args.attach)]
        if not found:
            window.prompts.error(f"No script waiting on this machine at {args.attach}: give its --token.")
            return False
        token = found[0]["token"]
    return window.attach_to(args.attach, token)


def apply_tree_options(window, args) -> None:
    """``--freeze``, ``--unfreeze`` (in that order) and ``--select`` on the model shown."""
    for path in args.freeze:
        window.set_trainable(path, False)
    for path in args.unfreeze:
        window.set_trainable(path, True)
    if args.select is not None:
        window.tree_widget.select_name(args.select)
