"""A Lightning fit with ``workbench.integrations.lightning.WorkbenchCallback`` (run as a script by the attach tests).

``python lightning_fit.py RUN_DIR [MAX_STEPS [STRATEGY]]``: fits a small CNN (10 classes)
on random 16x16 images until the window says Stop (or MAX_STEPS), an epoch of
20 steps and a validation after each; the module logs ``train_acc`` every step
and ``val_loss`` / ``val_acc`` per validation. Two param groups (features at
0.05, head at 0.1) and a StepLR. Then writes ``RUN_DIR/final.pt`` (the
LightningModule's state_dict) and ``RUN_DIR/final.json`` (every param group's
LR, steps done). With a STRATEGY (``ddp``, ``ddp_find_unused_parameters_true``):
a fit on two CPU processes (gloo), each rank writing ``final<rank>.pt`` /
``final<rank>.json``.
"""

import json
import logging
import sys
import warnings
from collections import OrderedDict
from pathlib import Path

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from workbench.integrations.lightning import WorkbenchCallback


class SmallCNN(pl.LightningModule):
    """conv-bn-relu twice, pooled, then a linear head."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(OrderedDict(
            conv1=nn.Conv2d(3, 8, 3, padding=1), bn1=nn.BatchNorm2d(8), relu1=nn.ReLU(),
            conv2=nn.Conv2d(8, 16, 3, padding=1), bn2=nn.BatchNorm2d(16), relu2=nn.ReLU(),
            pool=nn.AdaptiveAvgPool2d(1), flat=nn.Flatten()))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.features(x))

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        loss = nn.functional.cross_entropy(logits, y)
        self.log("train_acc", (logits.argmax(1) == y).float().mean())
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        optimizer = torch.optim.SGD([{"params": self.features.parameters(), "lr": 0.05},
                                     {"params": self.head.parameters(), "lr": 0.1}], momentum=0.9)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 10**6)}


def main() -> int:
    run_dir = Path(sys.argv[1])
    max_steps = int(sys.argv[2]) if len(sys.argv) > 2 else -1
    strategy = sys.argv[3] if len(sys.argv) > 3 else None
    torch.manual_seed(0)
    torch.set_num_threads(1)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    x, y = torch.randn(160, 3, 16, 16), torch.randint(0, 10, (160,))
    train = DataLoader(TensorDataset(x, y), batch_size=8, shuffle=True)
    val = DataLoader(TensorDataset(x[:16], y[:16]), batch_size=8)
    module = SmallCNN()
    ddp = {"strategy": strategy, "devices": 2} if strategy else {"devices": 1}
    trainer = pl.Trainer(accelerator="cpu", **ddp, max_epochs=100_000, max_steps=max_steps,
                         enable_checkpointing=False, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=1,
                         callbacks=[WorkbenchCallback(run_dir=run_dir, name="lightning_fit")])
    trainer.fit(module, train, val)
    suffix = str(trainer.global_rank) if strategy else ""
    torch.save(module.state_dict(), run_dir / f"final{suffix}.pt")
    (run_dir / f"final{suffix}.json").write_text(json.dumps({"lrs": [g["lr"] for g in trainer.optimizers[0].param_groups],
                                                    "steps": trainer.global_step}))
    if strategy and torch.distributed.is_initialized():
        torch.distributed.barrier()  # rank 0 (the test's process) exits only once rank 1 wrote its files
    return 0


if __name__ == "__main__":
    sys.exit(main())
