"""A Hugging Face Trainer with ``workbench.integrations.transformers.WorkbenchCallback`` (run as a script by the attach tests).

``python hf_train.py RUN_DIR [MAX_STEPS [ddp]]``: trains a tiny random-config BERT
for sequence classification (2 labels) on random token ids until the window
says Stop (or MAX_STEPS; -1: until Stop), logging every step, evaluating every
20 steps, a constant LR of 1e-3 (the Trainer makes two param groups: with and
without weight decay). Then writes ``RUN_DIR/final.pt`` (the model's
state_dict) and ``RUN_DIR/final.json`` (every param group's LR, steps done).
With ``ddp``: two ranks on the CPU (gloo), as ``torch.distributed.run`` would
start them: this process is rank 0 and starts rank 1; each writes
``final<rank>.pt`` / ``final<rank>.json``.
"""

import json
import logging
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import torch
import transformers
from transformers import (BertConfig, BertForSequenceClassification, PrinterCallback, Trainer,
                          TrainingArguments)

from workbench.integrations.transformers import WorkbenchCallback


def _dataset(n: int, seq: int, seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 100, (n, seq), generator=g)
    labels = torch.randint(0, 2, (n,), generator=g)
    return [{"input_ids": ids[i], "attention_mask": torch.ones(seq, dtype=torch.long), "labels": labels[i]}
            for i in range(n)]


def _start_rank1() -> subprocess.Popen:
    """Be rank 0 of two and start rank 1 (the environment ``torch.distributed.run`` gives each rank)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2",
                      RANK="0", LOCAL_RANK="0")
    return subprocess.Popen([sys.executable, __file__, *sys.argv[1:]], env=dict(os.environ, RANK="1", LOCAL_RANK="1"))


def main() -> int:
    run_dir = Path(sys.argv[1])
    max_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    ddp = len(sys.argv) > 3 and sys.argv[3] == "ddp"
    rank1 = _start_rank1() if ddp and "RANK" not in os.environ else None
    torch.manual_seed(0)
    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    logging.getLogger("accelerate").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
                        vocab_size=100, max_position_embeddings=64, num_labels=2)
    model = BertForSequenceClassification(config)
    args = TrainingArguments(output_dir=str(run_dir / "hf"), max_steps=max_steps, per_device_train_batch_size=8,
                             per_device_eval_batch_size=8, learning_rate=1e-3, lr_scheduler_type="constant",
                             weight_decay=0.01, logging_steps=1, eval_strategy="steps", eval_steps=20,
                             save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
                             dataloader_num_workers=0, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=_dataset(64, 16, 1), eval_dataset=_dataset(8, 16, 2),
                      callbacks=[WorkbenchCallback(run_dir=run_dir, name="hf_train")])
    trainer.remove_callback(PrinterCallback)  # a line per step on stdout would fill the test's pipe
    trainer.train()
    suffix = os.environ.get("RANK", "0") if ddp else ""
    torch.save(model.state_dict(), run_dir / f"final{suffix}.pt")
    (run_dir / f"final{suffix}.json").write_text(json.dumps({"lrs": [g["lr"] for g in trainer.optimizer.param_groups],
                                                             "steps": trainer.state.global_step}))
    if rank1 is not None:
        return rank1.wait(120)  # rank 0 (the test's process) exits once rank 1 wrote its files and exited
    return 0


if __name__ == "__main__":
    sys.exit(main())
