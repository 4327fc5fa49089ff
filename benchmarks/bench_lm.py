"""A GPT-2-shaped causal LM trained by Workbench's ``Trainer`` vs a plain loop and vs ``transformers.Trainer``.

Figures (issue 42):

``lm_train_ratio``
    Tokens per second of Workbench's :class:`~workbench.core.train.trainer.loop.Trainer`
    (task ``model_loss``, its default epoch checkpoints ``last.pt`` / ``best.pt`` and
    ``init.pt``) over a plain PyTorch loop on the same batches that saves model and
    optimizer with ``torch.save`` at each epoch's end. ``GPT2LMHeadModel`` from a
    ``GPT2Config`` (``N_LAYER`` layers, ``WIDTH`` wide, ``VOCAB`` tokens, ``SEQ``-token
    sequences, batch ``BATCH``), random init, AdamW, ``EPOCHS`` epochs of ``STEPS`` steps,
    a ``VAL_BATCHES``-batch validation each epoch on both sides. Both timed end to end,
    interleaved; median of ``PAIRS`` pairs. Target >= 0.97. Measured 0.98 (README "Fitting big models").
``lm_vs_hf_trainer_ratio``
    The same job in ``transformers.Trainer`` (``save_strategy="epoch"``, which saves model,
    optimizer, scheduler and RNG states; ``eval_strategy="epoch"``) over Workbench: its time
    divided by Workbench's (> 1: Workbench is faster), median of the runs interleaved with
    the pairs. Target >= 1.0 (report).

Random token ids (seeded): the figures measure the loop, not the data.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import torch  # noqa: E402

N_LAYER, WIDTH, HEADS, VOCAB, SEQ, BATCH = 4, 256, 4, 8192, 128, 8
#: Optimizer steps per epoch. The issue asks for >= 100, but one step of this model took 1.5-4 s on the shared
#: 2-core bench machine (load 4-7): 300 steps would be 10-20 min a side, ~1.5 h for the module. 12 steps x 3
#: epochs is ~1.5 min a side (~10 min for the module); short epochs make the fixed costs louder, not quieter.
STEPS = 12
EPOCHS = 3
VAL_BATCHES = 4
#: Interleaved (Workbench, plain) pairs, each followed by a transformers.Trainer run.
PAIRS = 2
LR = 3e-4


def _config():
    from transformers import GPT2Config

    return GPT2Config(n_layer=N_LAYER, n_embd=WIDTH, n_head=HEADS, vocab_size=VOCAB, n_positions=SEQ,
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)


def _model():
    from transformers import GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(_config())


def _batches():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (STEPS + VAL_BATCHES, BATCH, SEQ), generator=g)
    batches = [{"input_ids": x, "labels": x} for x in ids]
    return batches[:STEPS], batches[STEPS:]


def plain(folder: Path) -> float:
    """The plain loop, seconds: train, validate and ``torch.save`` model + optimizer at each epoch's end."""
    train, val = _batches()
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    t0 = time.perf_counter()
    for epoch in range(EPOCHS):
        model.train()
        for batch in train:
            loss = model(**batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()
        model.eval()
        with torch.no_grad():
            sum(model(**b).loss.item() for b in val)
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch}, folder / "ckpt.pt")
    return time.perf_counter() - t0


def workbench(folder: Path, tag: str) -> float:
    """Workbench's Trainer, seconds (its checkpoints on: ``init.pt``, ``last.pt`` / ``best.pt`` each epoch)."""
    from workbench.core.train.config import TaskConfig, TrainConfig
    from workbench.core.train.trainer.loop import Trainer

    train, val = _batches()
    cfg = TrainConfig(task=TaskConfig(kind="model_loss"), optimizer="adamw", lr=LR, epochs=EPOCHS,
                      run_dir=str(folder / f"wb-{tag}"), tensorboard=False)
    trainer = Trainer(_model(), cfg, data=(train, val))
    t0 = time.perf_counter()
    assert trainer.fit() == "completed", trainer.error
    return time.perf_counter() - t0


def hf_trainer(folder: Path, tag: str) -> float:
    """``transformers.Trainer`` on the same batches, seconds (epoch checkpoints and evaluation)."""
    from transformers import Trainer, TrainingArguments

    train, val = _batches()
    rows = lambda batches: [{"input_ids": x, "labels": x} for b in batches for x in b["input_ids"]]  # noqa: E731
    args = TrainingArguments(output_dir=str(folder / f"hf-{tag}"), per_device_train_batch_size=BATCH,
                             per_device_eval_batch_size=BATCH, num_train_epochs=EPOCHS, learning_rate=LR,
                             lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.01,
                             save_strategy="epoch", eval_strategy="epoch", logging_steps=10**9, report_to=[],
                             use_cpu=True, dataloader_num_workers=0, seed=0, disable_tqdm=True)
    trainer = Trainer(model=_model(), args=args, train_dataset=rows(train), eval_dataset=rows(val))
    t0 = time.perf_counter()
    trainer.train()
    return time.perf_counter() - t0


def run() -> dict[str, float]:
    tokens = EPOCHS * STEPS * BATCH * SEQ
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plain(folder)  # warm-up (imports, allocator) for neither side's figure
        ratios, hf_ratios, times = [], [], []
        for i in range(PAIRS):
            if i % 2 == 0:
                wb = workbench(folder, str(i))
                pl = plain(folder)
            else:
                pl = plain(folder)
                wb = workbench(folder, str(i))
            hf = hf_trainer(folder, str(i))
            ratios.append(pl / wb)
            hf_ratios.append(hf / wb)
            times.append((pl, wb, hf))
            print(f"pair {i}: plain {pl:.1f} s, workbench {wb:.1f} s, transformers.Trainer {hf:.1f} s "
                  f"({tokens / wb:,.0f} tokens/s)", flush=True)
    figures = {"lm_train_ratio": statistics.median(ratios), "lm_train_ratio_min": min(ratios),
               "lm_train_ratio_max": max(ratios), "lm_vs_hf_trainer_ratio": statistics.median(hf_ratios),
               "lm_workbench_tokens_per_s": tokens / statistics.median(t[1] for t in times),
               "lm_plain_tokens_per_s": tokens / statistics.median(t[0] for t in times)}
    return figures


if __name__ == "__main__":
    print(run())
