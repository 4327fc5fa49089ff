"""A small training loop attached with a short pause lease (run as a script by tests/core/attach/test_lease.py).

``python lease_loop.py RUN_DIR LEASE_S``: trains a two-layer MLP on one random batch until the window says Stop,
with ``workbench.attach(..., pause_lease_s=LEASE_S)``; a short sleep per step keeps it from taking a whole core.
"""

import sys
import time
from pathlib import Path

import torch
from torch import nn

import workbench


def main() -> int:
    run_dir, lease_s = Path(sys.argv[1]), float(sys.argv[2])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    with workbench.attach(model, optimizer, run_dir=run_dir, name="lease_loop", pause_lease_s=lease_s) as wb:
        while not wb.should_stop:
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            wb.step(loss)
            time.sleep(0.01)
    return 0


if __name__ == "__main__":
    sys.exit(main())
