"""A Hugging Face Trainer with ``workbench.integrations.transformers.WorkbenchCallback`` (run as a script by the attach tests).

``python hf_train.py RUN_DIR [MAX_STEPS]``: trains a tiny random-config BERT
for sequence classification (2 labels) on random token ids until the window
says Stop (or MAX_STEPS), logging every step, evaluating every 20 steps, a
constant LR of 1e-3 (the Trainer makes two param groups: with and without
weight decay). Then writes ``RUN_DIR/final.pt`` (the model's state_dict) and
``RUN_DIR/final.json`` (every param group's LR, steps done).
"""

import json
import logging
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


def main() -> int:
    run_dir = Path(sys.argv[1])
    max_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
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
    torch.save(model.state_dict(), run_dir / "final.pt")
    (run_dir / "final.json").write_text(json.dumps({"lrs": [g["lr"] for g in trainer.optimizer.param_groups],
                                                    "steps": trainer.state.global_step}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
