"""core.train.launch.parent_watch: the watch fires when the parent ends, and only then, without taking a lock.

A training process whose window is SIGKILLed (the watch at work in a real process) is ``test_parent_death.py``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from workbench.core.train.launch.parent_watch import ParentWatch

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")]


def test_the_watch_ignores_a_death_signal_while_the_parent_lives():
    """``PR_SET_PDEATHSIG`` fires when the *thread* that started the process ends: that is not the parent's end."""
    fired = []
    watch = ParentWatch(lambda: fired.append(1), poll_s=30.0).start()
    try:
        if watch.death_signal:
            os.kill(os.getpid(), signal.SIGUSR2)  # what the kernel sends when the forking thread ends
        time.sleep(0.3)  # the watch wakes at once on the signal, checks, and goes back to sleep
        assert fired == [] and not watch.fired.is_set()
        watch.parent_pid = -1  # as if re-parented: the next check fires
        os.kill(os.getpid(), signal.SIGUSR2) if watch.death_signal else watch._wake()
        assert watch.fired.wait(5.0) and fired == [1]
    finally:
        watch.stop()


def test_the_death_signal_handler_takes_no_lock():
    """A second death signal that arrives while the handler runs re-enters it on the same thread; a
    handler that takes a lock (``threading.Event.set``) then waits for itself for ever. A rank whose
    torchrun was SIGKILLed hung so, inside a forward, with three handler frames on its stack."""
    watch = ParentWatch(lambda: None, os.getppid(), poll_s=60.0)
    watch.start()
    entered: list[str] = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename == threading.__file__:
            entered.append(frame.f_code.co_name)
        elif event == "c_call" and getattr(arg, "__name__", "") in ("acquire", "__enter__"):
            entered.append(arg.__name__)

    try:
        sys.setprofile(profile)
        watch._on_signal(signal.SIGUSR2, None)
        watch._on_signal(signal.SIGUSR2, None)
    finally:
        sys.setprofile(None)
        watch.stop()
    assert entered == []
