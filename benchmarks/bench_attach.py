"""What ``workbench.attach`` costs a user's own training loop, with no window and with a window attached.

Figures, each for two loops, ``_digits`` (the demo: ``DigitsCNN`` on scikit-learn's
digits, batch 64, Adam 1e-3) and ``_resnet18`` (torchvision ``resnet18``, 10
classes, random 32x32 images, batch 32, SGD 0.05 with momentum), on the CPU with
:data:`THREADS` torch threads (all cores but one: the window's process needs a core,
and torch's OpenMP threads stall whenever another process takes one of theirs: on
the 2-core machine, digits at 2 threads fell from ~150 to ~10 steps/s while another
process computed), written the way a user writes the loop (forward,
``cross_entropy``, ``backward``, ``step``, ``zero_grad``; batches already in memory):

``attach_idle_overhead_ratio_<loop>``
    Steps per second of the loop calling ``wb.step(loss)`` after each optimizer
    step with no window attached, divided by the same loop without
    ``workbench.attach``. Target >= 0.99.
``attach_live_overhead_ratio_<loop>``
    The same with a window attached: ``workbench --attach HOST:PORT --token T``
    in its own process, headless (``QT_QPA_PLATFORM=offscreen``, no training
    process started ahead), which receives every event, draws the curves and,
    as any window does, installs its live probe callback in the script (the
    default cadence, within a 2 % time budget). Target >= 0.95. Without the
    ``workbench`` command (an install without its scripts), the consumer is a
    ``python -c`` loop over ``workbench.connect(...).events()`` (no probes):
    said on the console.

How: the two sides are two copies of the same model and optimizer in this
process (the attached one carries the probes' hooks, the plain one nothing),
interleaved step by step in ABBA order (plain, attached, attached, plain, ...)
and timed per step; the steps are summed into :data:`BLOCKS` blocks of at least
:data:`BLOCK_S` seconds and :data:`BLOCK_PAIRS` pairs, and each figure is the
median block ratio (plain seconds / attached seconds: attached steps/s over
plain) with the range of all blocks (``_min``, ``_max``) and the ratio of all
blocks' sums (``_pooled``: it counts in full a cost that comes less often than
once a block, such as a probe measurement of a slow model's steps). Why steps, not
segments of a second: this machine's speed wanders by ~8 % between one second
and the next, so two 1-second segments in a row differ as much as the overhead
measured (an A/A test of two plain copies in 1-second blocks: a block of
64-step segments spread its ratio by 7.8 % (sd), one of single steps by 0.55 %).
The script's sending thread encodes an event on its own time, which may fall in
the next plain step: 0.26 % of the attached steps' time (measured by
``tools/attach_breakdown.py``), so at most ~0.5 % of a ratio in the attached
side's favour.

The script's clock (:class:`ScriptClock`) leaves the plain steps out: the
probes' time budget, the metric batches and the away check of the attached
side see the time of its own steps, as in a script that trains alone (counted,
the interleaved plain steps doubled the probes' share of the attached steps).

The idle blocks run before the window starts. During the live blocks the window
process is stopped (``SIGSTOP``, so it takes no CPU: the plain side is a loop
with no Workbench at all) whenever the plain side's turn comes and continued
(``SIGCONT``) for the attached side's, where it catches up and draws as it would. Its
timers run on the wall clock, so it redraws about twice as often per attached
second as beside a script alone: the live figure errs on the low side. Before
the live blocks, the window's start-up (imports, first paint, the model
skeleton) is over: its CPU time has settled.
"""

from __future__ import annotations

import copy
import itertools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import torch  # noqa: E402
from torch import nn  # noqa: E402

#: Blocks per figure (each gives one ratio).
BLOCKS = 15
#: A block lasts at least this many seconds (both sides together) ...
BLOCK_S = 1.5
#: ... and holds at least this many pairs of steps (resnet18's 0.12 s steps: 25 pairs, blocks of ~6 s, spread
#: ~1 %; with 15 pairs its idle blocks spread 0.96-1.03).
BLOCK_PAIRS = 25
#: torch's threads on both sides.
THREADS = max(1, (os.cpu_count() or 2) - 1)
#: The consumer when the ``workbench`` command is missing: a client that reads every event.
CLIENT = """
import sys
import workbench

run = workbench.connect(sys.argv[1], sys.argv[2])
for _ in run.events():
    pass
"""


class Loop:
    """A user's training loop over batches held in memory; ``wb`` (optional) gets ``wb.step(loss)`` each step.

    Parameters
    ----------
    model : nn.Module
    optimizer : torch.optim.Optimizer
    batches : list of (Tensor, Tensor)
        Cycled through.
    wb : Attached, optional
    """

    def __init__(self, model: nn.Module, optimizer, batches: list, wb=None):
        self.model = model
        self.optimizer = optimizer
        self.batches = itertools.cycle(batches)
        self.wb = wb

    def run(self, steps: int) -> float:
        """Train ``steps`` steps; the seconds they took (wall clock)."""
        model, opt, wb = self.model, self.optimizer, self.wb
        t0 = time.perf_counter()
        for _ in range(steps):
            x, y = next(self.batches)
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            if wb is not None:
                wb.step(loss)
        return time.perf_counter() - t0


def digits_setup():
    """``(model, optimizer factory, batches)`` of the digits demo: the workbench digits split, batch 64."""
    from workbench.core.model.demo import DigitsCNN
    from workbench.core.train.config import DataConfig
    from workbench.core.train.data.datasets import build_datasets

    train_ds, _, _ = build_datasets(DataConfig(dataset="digits", batch_size=64))
    x, y = train_ds.tensors
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    batches = [(x[i:i + 64], y[i:i + 64]) for i in range(0, len(x) - 63, 64)]
    return DigitsCNN(), lambda m: torch.optim.Adam(m.parameters(), lr=1e-3), batches


def resnet18_setup():
    """``(model, optimizer factory, batches)``: torchvision resnet18 on random 32x32 images, batch 32."""
    import torchvision

    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(32, 3, 32, 32, generator=g), torch.randint(0, 10, (32,), generator=g))
               for _ in range(8)]
    model = torchvision.models.resnet18(num_classes=10)
    return model, lambda m: torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9), batches


class Window:
    """The window in its own process, attached to ``wb``; :meth:`pause` / :meth:`go_on` stop and continue it.

    Parameters
    ----------
    wb : Attached
    folder : Path
        Its settings and data folders (never the user's).
    """

    def __init__(self, wb, folder: Path):
        self.wb = wb
        exe = shutil.which("workbench", path=str(Path(sys.executable).parent)) or shutil.which("workbench")
        env = dict(os.environ, QT_QPA_PLATFORM="offscreen", WORKBENCH_START_AHEAD="0",
                   WORKBENCH_SETTINGS_DIR=str(folder / "settings"), WORKBENCH_DATA_DIR=str(folder / "data"))
        if exe:
            self.kind = "the window (workbench --attach, offscreen)"
            cmd = [exe, "--attach", wb.address, "--token", wb.token]
        else:
            self.kind = "a workbench.connect client (no workbench command found)"
            cmd = [sys.executable, "-c", CLIENT, wb.address, wb.token]
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"  consumer: {self.kind}, pid {self.proc.pid}", flush=True)

    def wait_attached(self, timeout: float = 120.0) -> None:
        """Until the script serves the window (start-up: imports, the first paint).

        Raises
        ------
        RuntimeError
            The window exited or did not attach within ``timeout`` seconds.
        """
        end = time.monotonic() + timeout
        while self.wb.server.windows < 1:
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"{self.kind} did not attach (exit code {self.proc.poll()})")
            time.sleep(0.1)

    def cpu_s(self) -> float:
        """The window process's CPU seconds so far (Linux ``/proc``; 0 elsewhere)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def settle(self, timeout: float = 60.0) -> None:
        """Until the window uses under 5 % of a core over half a second (its start-up work is done)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            c0 = self.cpu_s()
            time.sleep(0.5)
            if self.cpu_s() - c0 < 0.025:
                return

    def pause(self) -> None:
        """Stop the window process and wait until it is stopped (it takes no CPU until :meth:`go_on`).

        ``SIGSTOP`` lands asynchronously: the wait keeps the window's last microseconds out of the
        plain step that follows (Linux ``/proc``; elsewhere the signal alone).
        """
        self.proc.send_signal(signal.SIGSTOP)
        stat = Path(f"/proc/{self.proc.pid}/stat")
        for _ in range(10_000):
            try:
                if stat.read_text().rsplit(")", 1)[1].split()[0] in "Tt":
                    return
            except (OSError, IndexError):
                return

    def go_on(self) -> None:
        """Continue the window process."""
        self.proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        """End the window process."""
        self.go_on()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ScriptClock:
    """The attached script's ``time`` with the interleaved plain steps left out (see the module docstring).

    Installed by :meth:`install` in place of the ``time`` module of
    ``workbench.core.attach.script`` and ``workbench.core.probe.callback`` (and as
    the probes' step clock); :meth:`pause` and :meth:`resume` bracket the time
    that is not the script's.
    """

    def __init__(self):
        self.left_out = 0.0
        self._paused_at: float | None = None
        self._undo: list = []

    def perf_counter(self) -> float:
        """``time.perf_counter()`` less the time left out, s."""
        return time.perf_counter() - self.left_out

    def monotonic(self) -> float:
        """``time.monotonic()`` less the time left out, s."""
        return time.monotonic() - self.left_out

    def __getattr__(self, name):
        return getattr(time, name)

    def pause(self) -> None:
        """From now on, time is not the script's (until :meth:`resume`)."""
        self._paused_at = time.perf_counter()

    def resume(self) -> None:
        """The script's time runs again."""
        if self._paused_at is not None:
            self.left_out += time.perf_counter() - self._paused_at
            self._paused_at = None

    def install(self) -> None:
        """Be the clock of the attached script's step, its metric batches and its probes."""
        from workbench.core.attach import script
        from workbench.core.probe import callback

        init = callback._StepCost.__init__
        self._undo = [(script, "time", script.time), (callback, "time", callback.time),
                      (init, "__defaults__", init.__defaults__)]
        script.time = callback.time = self
        init.__defaults__ = (self.perf_counter,)

    def uninstall(self) -> None:
        """Give the modules their ``time`` back."""
        for obj, name, value in reversed(self._undo):
            setattr(obj, name, value)
        self._undo = []


def interleaved(plain: Loop, attached: Loop, clock: ScriptClock, before_plain=None,
                before_attached=None) -> list[tuple[float, float]]:
    """:data:`BLOCKS` blocks of steps interleaved ABBA: ``(plain seconds, attached seconds)`` of each.

    ``before_plain`` / ``before_attached`` run (untimed) when the side changes.
    """
    blocks = []
    current = None
    clock.pause()
    try:
        for _ in range(BLOCKS):
            spent = {"plain": 0.0, "attached": 0.0}
            pairs = 0
            while pairs < BLOCK_PAIRS or spent["plain"] + spent["attached"] < BLOCK_S:
                for side in (("plain", "attached") if pairs % 2 == 0 else ("attached", "plain")):
                    if side != current:
                        current = side
                        hook = before_plain if side == "plain" else before_attached
                        if hook is not None:
                            hook()
                    if side == "plain":
                        spent[side] += plain.run(1)
                    else:
                        clock.resume()
                        spent[side] += attached.run(1)
                        clock.pause()
                pairs += 1
            blocks.append((spent["plain"], spent["attached"]))
    finally:
        clock.resume()
    return blocks


def measure(name: str, setup, folder: Path) -> dict[str, float]:
    """The idle and live ratios of one loop (see the module docstring)."""
    import workbench

    model, make_opt, batches = setup()
    twin = copy.deepcopy(model)
    plain = Loop(model, make_opt(model), batches)
    opt = make_opt(twin)
    clock = ScriptClock()
    clock.install()
    try:
        wb = workbench.attach(twin, opt, run_dir=folder / f"run-{name}", name=f"bench_attach_{name}")
    except BaseException:
        clock.uninstall()
        raise
    attached = Loop(twin, opt, batches, wb)
    try:
        plain.run(5)
        attached.run(5)
        per_step = plain.run(10) / 10
        print(f"  {name}: {1 / per_step:.1f} steps/s plain", flush=True)
        idle = interleaved(plain, attached, clock)
        window = Window(wb, folder / name)
        try:
            window.wait_attached()
            window.settle()
            attached.run(max(5, round(1.0 / per_step)))  # the window's probes install at a step boundary
            window.settle()
            live = interleaved(plain, attached, clock, before_plain=window.pause, before_attached=window.go_on)
        finally:
            window.close()
    finally:
        wb.close()
        clock.uninstall()
    figures = {}
    for kind, blocks in (("idle", idle), ("live", live)):
        key = f"attach_{kind}_overhead_ratio_{name}"
        ratios = [p / a for p, a in blocks]
        pooled = sum(p for p, _ in blocks) / sum(a for _, a in blocks)
        print(f"{key}: median {statistics.median(ratios):.3f} over {BLOCKS} blocks "
              f"(range {min(ratios):.3f}-{max(ratios):.3f}; pooled {pooled:.3f})", flush=True)
        figures.update({key: statistics.median(ratios), f"{key}_min": min(ratios), f"{key}_max": max(ratios),
                        f"{key}_pooled": pooled})
    return figures


def run() -> dict[str, float]:
    """Every figure of the module docstring."""
    figures: dict[str, float] = {}
    torch.set_num_threads(THREADS)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        os.environ["WORKBENCH_ATTACH_DIR"] = str(folder / "attach")  # no discovery file where windows look
        for name, setup in (("digits", digits_setup), ("resnet18", resnet18_setup)):
            torch.manual_seed(0)
            figures.update(measure(name, setup, folder))
    return figures


if __name__ == "__main__":
    print(run())
