"""Shared fixtures. Tests run headless: QT_QPA_PLATFORM=offscreen is forced here too."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    """The architecture index and timm's name list go to one temporary cache for the whole session
    (built once, shared by the tests; never the user's ``~/.cache/workbench``)."""
    previous = os.environ.get("WORKBENCH_CACHE_DIR")
    os.environ["WORKBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if previous is None:
        os.environ.pop("WORKBENCH_CACHE_DIR", None)
    else:
        os.environ["WORKBENCH_CACHE_DIR"] = previous


@pytest.fixture(autouse=True)
def _seed():
    """Every test starts from the same torch RNG state."""
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path, monkeypatch):
    """QSettings and the default run folder go to a per-test temporary folder."""
    monkeypatch.setenv("WORKBENCH_SETTINGS_DIR", str(tmp_path / "settings"))
    monkeypatch.setenv("WORKBENCH_DATA_DIR", str(tmp_path / "data"))
    # scripts attached during a test write their discovery files here, never in the user's runtime dir
    monkeypatch.setenv("WORKBENCH_ATTACH_DIR", str(tmp_path / "attach"))
    # a window starts no training process ahead (each would import torch on these 2 cores);
    # tests of that start-ahead set it back to "1"
    monkeypatch.setenv("WORKBENCH_START_AHEAD", "0")
    yield


@pytest.fixture
def no_dangling_qthreads(qtbot):
    """Fail a test that leaves a worker QThread or a child process running (waits up to 10 s for each to end).

    Use it with ``pytestmark = pytest.mark.usefixtures("no_dangling_qthreads")``.
    """
    import multiprocessing

    from workbench.ui.threading import live_threads

    yield
    try:
        qtbot.waitUntil(lambda: not live_threads(), timeout=10_000)
    except AssertionError:
        for thread in live_threads():  # never terminate(): ask, then wait
            thread.quit()
        pytest.fail(f"test left {len(live_threads())} worker QThread(s) running")
    try:
        qtbot.waitUntil(lambda: not multiprocessing.active_children(), timeout=10_000)
    except AssertionError:
        from workbench.core.train.launch.training_process import end_all

        left = multiprocessing.active_children()
        end_all()
        pytest.fail(f"test left {len(left)} child process(es) running: {left}")


@pytest.fixture
def main_window(qtbot, tmp_path):
    """The real MainWindow on the demo, shown, with recording prompts.

    Yields ``(window, panel)``; ``window.prompts.errors`` (also ``panel.errors``)
    collects what would have been an error dialog, Stop is confirmed without
    asking, runs go under ``tmp_path/run``.
    """
    from tests.ui.helpers import RecordingPrompts
    from workbench.ui.main_window import MainWindow

    win = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(win)
    panel = win.training_panel
    panel.errors = win.prompts.errors
    panel.settings.run_dir_edit.setText(str(tmp_path / "run"))
    win.resize(1400, 900)
    win.show()
    yield win, panel
    if panel.is_running():
        panel.shutdown(ask=False)


@pytest.fixture
def window(qtbot):
    """A real MainWindow on the demo with recording prompts; ``window.errors`` is ``window.prompts.errors``."""
    from tests.ui.helpers import RecordingPrompts
    from workbench.ui.main_window import MainWindow

    win = MainWindow(prompts=RecordingPrompts())
    qtbot.addWidget(win)
    win.errors = win.prompts.errors
    return win


@pytest.fixture(scope="session")
def example_plugin():
    """The package ``tests/example_plugin`` (architecture ``tiny_mlp`` by entry point), installed by ``make venv``.

    Fails, never skips, when it is missing: a Makefile that stopped installing
    it must not turn the plugin tests silently off. Returns its distribution.
    """
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        return distribution("workbench-example-plugin")
    except PackageNotFoundError:
        pytest.fail("the example plugin is not installed in this venv: run `make venv` (it installs "
                    "tests/example_plugin), or `pip install -e tests/example_plugin`")


from tests.disk import small_disk  # noqa: E402,F401 - a fixture every test directory may use
