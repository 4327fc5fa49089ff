"""Data-parallel agreement: every rank applies rank 0's commands, pause and stop at the same step boundary.

In a ``DistributedDataParallel`` run the window (or the launcher) steers rank 0;
the other ranks must do the same thing at the same step, or they wait for ever
in the next gradient all-reduce (or train a different model). :class:`RankSync`
carries the agreement on the all-reduce each step already makes for the global
loss: the buffer ``[loss * n, n, stop, commands, pause]`` is summed over ranks,
where ``stop`` is 1 on any rank that was asked to stop (Ctrl-C, the launcher's
Stop), and ``commands`` and ``pause`` are rank 0's (0 elsewhere). When rank 0
has commands, one ``broadcast_object_list`` sends them (small picklable
dataclasses of :mod:`workbench.core.train.trainer.commands`), and every rank applies them
at the next step boundary. A pause keeps the ranks in lockstep: rank 0 waits on
its :class:`~workbench.core.train.trainer.control.RunControl` and broadcasts its state
every :data:`PAUSE_TICK_S`; the others follow it (and apply the commands given
during the pause), so no rank blocks inside a collective and every rank keeps
sending its heartbeat (``on_heartbeat``).

This is Workbench's own because it is what the product steers: DDP itself has
no notion of a command. Lightning's strategies likewise broadcast rank 0's
decisions (``strategy.broadcast``) and reduce a stop flag
(``reduce_boolean_decision``). Qt-free.
"""

from __future__ import annotations

import torch

from workbench.core.train.trainer.commands import SetTrainable
from workbench.core.train.trainer.types import LockstepRun

__all__ = ["RankSync", "STOP_CHECK_STEPS", "PAUSE_TICK_S"]

#: On CUDA the agreed flags are read (a host-device sync) every this many steps, at the same steps on every rank.
STOP_CHECK_STEPS = 16
#: While paused, rank 0 tells the others its state this often (seconds); it is also their heartbeat.
PAUSE_TICK_S = 0.5


class RankSync:
    """The per-step agreement of one rank of a data-parallel run (composed into the Trainer's strategy,
    or an attached script's :class:`~workbench.core.attach.script.Attached`).

    Parameters
    ----------
    run : LockstepRun
        Its ``world_size`` is > 1 and the default process group is initialized.

    Attributes
    ----------
    stop : bool
        Every rank agreed to stop at the next boundary (a stop was asked of one of them:
        ``run.control.request_stop()`` by Ctrl-C, the launcher or the window).
    agreed : list
        Commands every rank applies at the next step boundary.
    pause_agreed : bool
        Rank 0 was paused when the flags were last read: every rank pauses at the next boundary.
    """

    def __init__(self, run: LockstepRun):
        self.run = run
        self.stop = False
        self.agreed: list = []
        self.pause_agreed = False

    def reset(self) -> None:
        """End of ``fit()``."""
        self.stop = False
        self.agreed = []
        self.pause_agreed = False

    def reduce(self, loss: torch.Tensor, n: int, *, deferred: bool) -> tuple[torch.Tensor, int]:
        """The mean loss over every rank's samples of this step and their count; reads the flags.

        Parameters
        ----------
        loss : Tensor
            This rank's mean loss of the step (scalar).
        n : int
            This rank's batch size.
        deferred : bool
            CUDA: the flags are read only every :data:`STOP_CHECK_STEPS` steps, and the
            count is taken as ``n * world_size`` (exact but for the last partial batch).

        Returns
        -------
        (Tensor, int)
        """
        import torch.distributed as dist

        tr = self.run
        read = not deferred or tr.step % STOP_CHECK_STEPS == 0
        main = tr.rank == 0
        outbox = tr.control.take_commands() if main and read else []
        paused = 1.0 if main and read and tr.control.is_paused else 0.0
        dev = loss.device
        buf = torch.stack([loss.detach().float() * n, torch.tensor(float(n), device=dev),
                           torch.tensor(1.0 if tr.control.stop_requested else 0.0, device=dev),
                           torch.tensor(float(len(outbox)), device=dev), torch.tensor(paused, device=dev)])
        dist.all_reduce(buf)
        if read:
            flags = buf[2:].tolist()  # the one read (a sync on CUDA, every STOP_CHECK_STEPS steps)
            if flags[0] > 0:
                self.stop = True
                tr.control.request_stop()  # ends a wait of this rank's own (a NaN decision)
            if flags[1] > 0:
                self.agreed.extend(self._broadcast(outbox))
            self.pause_agreed = self.pause_agreed or flags[2] > 0
        if deferred:
            return buf[0] / buf[1], n * tr.world_size
        return buf[0] / buf[1], int(buf[1])

    @staticmethod
    def _broadcast(objs):
        import torch.distributed as dist

        box = [objs]
        dist.broadcast_object_list(box, src=0)  # rank 0 keeps its own objects (their result fields reach it)
        return box[0]

    def boundary(self) -> None:
        """Apply the agreed commands; pause in lockstep when agreed (commands given meanwhile apply on all)."""
        tr = self.run
        self._apply(self.agreed)
        self.agreed = []
        if not self.pause_agreed:
            return
        self.pause_agreed = False
        tr.lockstep_paused()
        if tr.edit_log is not None:
            tr.edit_log.write(tr.step, {"op": "pause"})
        state = "paused"
        while state == "paused":
            self._beat()
            if tr.rank == 0:
                state, cmds = self._rank0_tick()
            else:
                state, cmds = "", []
            state, cmds = self._broadcast((state, cmds))
            self._apply(cmds)
        if state == "stop":
            self.stop = True
            tr.control.request_stop()
        elif tr.edit_log is not None:
            tr.edit_log.write(tr.step, {"op": "resume"})
        tr.lockstep_resumed()

    def decide(self, asked: bool) -> str:
        """The answer to a NaN/Inf pause, rank 0's, on every rank (``lower_lr``, ``rollback``, ``stop``,
        or ``end`` when rank 0 has no one to ask); the ranks keep their heartbeat while the user decides.

        Parameters
        ----------
        asked : bool
            Rank 0 asked its callbacks (the window) and waits for their answer.
        """
        tr = self.run
        while True:
            self._beat()
            action = None
            if tr.rank == 0:
                action = tr.control.wait_for_decision(PAUSE_TICK_S) if asked else "end"
            action = self._broadcast(action)
            if action is not None:
                return action

    def _beat(self) -> None:
        self.run.heartbeat()

    def _rank0_tick(self) -> tuple[str, list]:
        """Rank 0, paused: wait up to :data:`PAUSE_TICK_S` for a resume, a stop or commands."""
        control = self.run.control
        control.wait_for_change(PAUSE_TICK_S)
        cmds = control.take_commands()
        if control.stop_requested:
            return "stop", cmds
        return ("paused" if control.is_paused else "resume"), cmds

    def _apply(self, cmds: list) -> None:
        tr = self.run
        rewrap = False
        for cmd in cmds:
            tr.apply_one(cmd)
            rewrap = rewrap or (isinstance(cmd, SetTrainable) and bool(cmd.changed))
        if rewrap:
            tr.wrap_ddp()  # the reducer holds exactly the parameters that now have gradients
