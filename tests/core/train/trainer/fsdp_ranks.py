"""Run by ``test_fsdp.py`` on 2 Gloo ranks (``python -m torch.distributed.run --nproc-per-node 2 fsdp_ranks.py OUT``).

In one process group, three ``strategy = "fsdp"`` runs of a tiny GPT-2 (2 layers, 64 wide, vocabulary 256;
each rank its own batches), with ``transformer.h.0`` frozen by a command at step 3:

- ``full``: 2 epochs of 5 steps uninterrupted, epoch checkpoints (``last.pt`` + ``last.dcp/``, ``best.*``),
  a ``SaveNow`` asked at step 4 (``saved.pt`` + ``saved.dcp/``, every rank writing);
- ``cut``: the same, also checkpoints every 3 steps (``dcp.async_save``), stopped after step 8 (a stop asked at
  step 7 travels with step 8's all-reduce): its ``last.pt`` is the stop's synchronous write; a copy of step 6's
  background write is kept as ``at6/``;
- ``resumed``: ``cut``'s ``last.pt`` resumed to the end; ``resumed6``: ``at6/last.pt`` resumed to the end;
- ``acc`` (2 steps of 2 accumulated batches of 4) against ``big`` (2 steps of batches of 8), without dropout.

Rank 0 writes ``OUT/result.json``: each run's step losses, whether every rank's shards of ``resumed`` equal
``full``'s, whether the frozen block stayed bit-identical, and the refusals' messages.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from workbench.core.errors import TrainingError
from workbench.core.train.config import TaskConfig, TrainConfig
from workbench.core.train.trainer.commands import SaveNow, SetTrainable
from workbench.core.train.trainer.hooks import Callback
from workbench.core.train.trainer.loop import Trainer

FROZEN = "transformer.h.0"


def tiny_gpt2(dropout: float = 0.1):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=256, n_positions=32,
                                      bos_token_id=0, eos_token_id=0, resid_pdrop=dropout, embd_pdrop=dropout,
                                      attn_pdrop=dropout))


def batches(rank: int) -> tuple[list, list]:
    g = torch.Generator().manual_seed(100 + rank)
    out = []
    for _ in range(6):
        ids = torch.randint(0, 256, (4, 16), generator=g)
        out.append({"input_ids": ids, "labels": ids.clone()})
    return out[:5], out[5:]


class Steer(Callback):
    """Records step losses; rank 0 freezes the first block after step 3; stops after ``stop_at``."""

    def __init__(self, stop_at: int | None = None, keep: Path | None = None, save_to: Path | None = None):
        self.losses: dict[int, float] = {}
        self.stop_at = stop_at
        self.keep = keep
        self.save_to = save_to
        self.frozen_at: dict[str, torch.Tensor] = {}
        self.lines: list[str] = []

    def on_progress(self, trainer, text):
        self.lines.append(text)

    def on_step_end(self, trainer, rec):
        if trainer.step == 3 and trainer.is_main:
            trainer.queue(SetTrainable([FROZEN], False))
        if trainer.step == 4 and trainer.is_main and self.save_to is not None:  # the window's Save now
            trainer.queue(SaveNow(str(self.save_to)))
        if trainer.step == self.stop_at:
            trainer.request_stop()
        if trainer.step == 7 and self.keep is not None:  # step 6's background write, as it is on disk
            trainer.wait_for_saves()
            if trainer.is_main:
                self.keep.mkdir()
                shutil.copy(trainer.run_dir / "last.pt", self.keep / "last.pt")
                shutil.copytree(trainer.run_dir / "last.dcp", self.keep / "last.dcp")
            dist.barrier()

    def on_metrics(self, trainer, batch):
        self.losses.update({int(r["step"]): float(r["loss"]) for r in batch})

    def on_command_applied(self, trainer, command):
        if isinstance(command, SaveNow):
            self.saved_to = command.saved_to
            return
        self.frozen_at = {n: p.to_local().clone() for n, p in trainer.model.named_parameters()
                          if n.startswith(FROZEN)}


def run(out: Path, name: str, steer: Steer, resume: Path | None = None, data=None, dropout: float = 0.1,
        **kw) -> Trainer:
    rank = dist.get_rank()
    kw = {"epochs": 2, "optimizer": "adamw", "lr": 3e-3, **kw}
    cfg = TrainConfig(task=TaskConfig(kind="model_loss"), weight_decay=0.01,
                      scheduler="cosine", seed=3, strategy="fsdp", run_dir=str(out / name), tensorboard=False, **kw)
    tr = Trainer(tiny_gpt2(dropout), cfg, [steer], data=data or batches(rank))
    if resume is not None:
        tr.resume_from(resume)
    reason = tr.fit()
    assert reason in ("completed", "stopped"), (name, reason, tr.error)
    return tr


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result: dict = {}
    full = run(out, "full", steer_full := Steer(save_to=out / "saved.pt"))
    cut = run(out, "cut", steer_cut := Steer(stop_at=7, keep=out / "at6"), checkpoint_every_steps=3)
    resumed = run(out, "resumed", steer_resumed := Steer(), resume=out / "cut" / "last.pt")
    resumed6 = run(out, "resumed6", steer_resumed6 := Steer(), resume=out / "at6" / "last.pt")
    same = all(torch.equal(a.to_local(), b.to_local()) and torch.equal(a.to_local(), c.to_local())
               for a, b, c in zip(full.model.parameters(), resumed.model.parameters(), resumed6.model.parameters()))
    frozen = all(torch.equal(steer_full.frozen_at[n], p.to_local()) for n, p in full.model.named_parameters()
                 if n.startswith(FROZEN))
    # accumulation: 2 batches of 4 a step (gradients reduce-scattered once) = 1 batch of 8
    train, val = batches(rank)
    plain = {"dropout": 0.0, "epochs": 1, "optimizer": "sgd", "lr": 0.5}  # SGD: a step linear in the gradient
    acc = run(out, "acc", Steer(), data=(train[:4], val), accumulate_grad_batches=2, **plain)
    pairs = [{k: torch.cat([a[k], b[k]]) for k in a} for a, b in zip(train[0:4:2], train[1:4:2])]
    big = run(out, "big", Steer(), data=(pairs, val), **plain)
    accumulated = all(torch.allclose(a.to_local(), b.to_local(), rtol=1e-4, atol=1e-6)
                      for a, b in zip(acc.model.parameters(), big.model.parameters())) and acc.step == big.step == 2
    flags = torch.tensor([int(same), int(frozen), int(bool(steer_full.frozen_at)), int(accumulated)])
    dist.all_reduce(flags, op=dist.ReduceOp.MIN)
    try:  # a whole-model file (init.pt) is not resumed by a sharded run
        Trainer(tiny_gpt2(), full.config, data=batches(rank)).resume_from(out / "full" / "init.pt")
        refused = ""
    except TrainingError as e:
        refused = str(e)
    result.update(full=steer_full.losses, cut=steer_cut.losses, resumed=steer_resumed.losses,
                  resumed6=steer_resumed6.losses,
                  same_shards=bool(flags[0]), frozen_kept=bool(flags[1]),
                  freeze_applied=bool(flags[2]), accumulated=bool(flags[3]), refused_full=refused, lines=steer_full.lines,
                  saved_to=getattr(steer_full, "saved_to", None), steps=[full.step, cut.step, resumed.step, resumed6.step])
    if rank == 0:
        (out / "result.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
