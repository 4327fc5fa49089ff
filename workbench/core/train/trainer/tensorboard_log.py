"""A run's TensorBoard scalars: :class:`TensorBoardLog` (rank 0, ``config.tensorboard``). Qt-free.

The step scalars are written once per emission of the step metrics (4-25 Hz:
one ``add_scalar`` per step cost 8 % of a demo step), the epoch scalars at the
epoch's last global step, as ``metrics.csv``'s step column. The writer's own
thread flushes every :data:`TB_FLUSH_S`: an explicit flush made the training
thread wait ~7 ms per epoch for the file write.
"""

from __future__ import annotations

import math
from pathlib import Path

__all__ = ["TensorBoardLog", "TB_FLUSH_S"]

#: Seconds between the TensorBoard writer's flushes (its own thread); TensorBoard shows a new point within this.
TB_FLUSH_S = 5
#: The tags of the epoch metrics that are not named ``val/<name>`` or ``epoch/<name>``.
_EPOCH_TAGS = {"train_loss": "epoch/train_loss", "val_loss": "val/loss", "val_acc": "val/accuracy"}


class TensorBoardLog:
    """The scalars of one run in ``run_dir/tensorboard``.

    Parameters
    ----------
    writer : torch.utils.tensorboard.SummaryWriter
        From :meth:`open`.

    Attributes
    ----------
    writer : SummaryWriter
        Callbacks may add to it (the probes' histograms: ``trainer.tensorboard``).
    """

    def __init__(self, writer):
        self.writer = writer

    @classmethod
    def open(cls, run_dir: Path) -> "TensorBoardLog | None":
        """A log into ``run_dir/tensorboard`` when the tensorboard package is installed, else None."""
        try:
            import tensorboard  # noqa: F401
            from torch.utils.tensorboard import SummaryWriter
        except Exception:  # noqa: BLE001 - optional
            return None
        try:
            return cls(SummaryWriter(str(run_dir / "tensorboard"), flush_secs=TB_FLUSH_S))
        except Exception:  # noqa: BLE001
            return None

    def steps(self, rows: list[dict], samples_per_s: float) -> None:
        """The last row of an emission: ``train/loss`` (when finite), ``train/lr``, ``train/samples_per_s``."""
        last = rows[-1]
        if math.isfinite(last["loss"]):
            self.writer.add_scalar("train/loss", last["loss"], last["step"])
        self.writer.add_scalar("train/lr", last["lr"], last["step"])
        if math.isfinite(samples_per_s):
            self.writer.add_scalar("train/samples_per_s", samples_per_s, last["step"])

    def epoch(self, metrics: dict, keys, step: int) -> None:
        """The finite values of ``metrics[k]`` for ``k`` in ``keys``, at global step ``step``."""
        for k in dict.fromkeys(keys):
            v = metrics[k]
            tag = _EPOCH_TAGS.get(k) or (f"val/{k[4:]}" if k.startswith("val_") else f"epoch/{k}")
            if isinstance(v, float) and math.isfinite(v):
                self.writer.add_scalar(tag, v, step)

    def close(self) -> None:
        """Flush and close the writer."""
        self.writer.close()
