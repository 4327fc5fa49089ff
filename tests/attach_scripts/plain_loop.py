"""A user's own training loop with ``workbench.attach`` (run as a script by the attach tests).

``python plain_loop.py RUN_DIR [MAX_STEPS]``: trains a torchvision resnet18
(10 classes) on random 32x32 images until the window says Stop (or MAX_STEPS),
an epoch every 20 steps; then writes ``RUN_DIR/final.pt`` (the state_dict) and
``RUN_DIR/final.json`` (every param group's LR, steps done).
"""

import json
import sys
from pathlib import Path

import torch
import torchvision
from torch import nn

import workbench


def main() -> int:
    run_dir = Path(sys.argv[1])
    max_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torchvision.models.resnet18(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    steps = 0
    with workbench.attach(model, optimizer, run_dir=run_dir, name="plain_loop") as wb:
        while steps < max_steps and not wb.should_stop:
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            steps += 1
            wb.step(loss, batch=(x, y), acc=0.5)
            if steps % 20 == 0:
                wb.epoch_end(val_loss=float(loss))
    torch.save(model.state_dict(), run_dir / "final.pt")
    (run_dir / "final.json").write_text(json.dumps({"lrs": [g["lr"] for g in optimizer.param_groups],
                                                    "steps": steps}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
