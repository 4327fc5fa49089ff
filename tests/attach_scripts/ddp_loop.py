"""A user's own DistributedDataParallel loop with ``workbench.attach`` on two CPU ranks (gloo).

``python ddp_loop.py RUN_DIR [MAX_STEPS]``: this process is rank 0 (it listens for the window);
it starts rank 1 with ``multiprocessing``. Each rank trains a torchvision resnet18 wrapped in
``DistributedDataParallel(find_unused_parameters=True)`` (freezing mid-run needs it) on its own
random 32x32 batch until the window says Stop, then writes ``RUN_DIR/final{rank}.pt`` and
``RUN_DIR/final{rank}.json`` (every param group's LR, steps done).
"""

import json
import multiprocessing
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torchvision
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import workbench


def worker(rank: int, port: int, run_dir: str, max_steps: int) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10)
    net = DistributedDataParallel(model, find_unused_parameters=True)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    torch.manual_seed(rank + 1)
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    steps = 0
    with workbench.attach(model, optimizer, run_dir=run_dir, name="ddp_loop") as wb:
        wb.use_ddp(net)  # what the wrapper can follow: it was built with find_unused_parameters, freezing works
        while steps < max_steps and not wb.should_stop:
            loss = nn.functional.cross_entropy(net(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            steps += 1
            wb.step(loss)
    out = Path(run_dir)
    torch.save(model.state_dict(), out / f"final{rank}.pt")
    (out / f"final{rank}.json").write_text(json.dumps({"lrs": [g["lr"] for g in optimizer.param_groups],
                                                       "steps": steps}))
    dist.destroy_process_group()


def main() -> int:
    run_dir = sys.argv[1]
    max_steps = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    other = multiprocessing.get_context("spawn").Process(target=worker, args=(1, port, run_dir, max_steps))
    other.start()
    worker(0, port, run_dir, max_steps)
    other.join(60)
    return 0 if other.exitcode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
