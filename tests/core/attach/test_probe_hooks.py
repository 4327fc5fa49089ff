"""A probe that raises inside a steered run is logged, told and removed; the others go on being called."""

from __future__ import annotations

import logging

from workbench.core.attach.probe_hooks import call_probes


class _Probe:
    def __init__(self, fail: bool):
        self.fail, self.calls, self.told = fail, [], []

    def on_step_end(self, *args):
        self.calls.append(args)
        if self.fail:
            raise RuntimeError("boom")

    def on_exception(self, state, exc, tb):
        self.told.append((state, str(exc), tb))


def test_a_failing_probe_is_removed_told_and_logged_and_the_others_still_run(caplog):
    good, bad = _Probe(False), _Probe(True)
    probes = [bad, good]
    with caplog.at_level(logging.WARNING, "workbench.attach"):
        call_probes(probes, "on_step_end", (1, 2), state="run", log=logging.getLogger("workbench.attach"),
                    who="workbench train")
        call_probes(probes, "on_step_end", (3,), state="run", log=logging.getLogger("workbench.attach"),
                    who="workbench train", traceback_text="")
    assert probes == [good] and good.calls == [(1, 2), (3,)] and bad.calls == [(1, 2)]
    assert bad.told[0][:2] == ("run", "boom") and "RuntimeError" in bad.told[0][2]
    assert "workbench train: a probe failed in on_step_end and was removed: RuntimeError: boom" in caplog.text
