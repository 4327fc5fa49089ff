"""``strategy = "fsdp"`` (FSDP2 ``fully_shard``): 2 Gloo ranks on CPU train a tiny GPT-2, write sharded
checkpoints and resume bit-exactly; what is refused says so (``workbench.core.train.trainer.fsdp``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from workbench.core.errors import TrainingError
from workbench.core.train.config import TrainConfig
from workbench.core.train.trainer.fsdp import mixed_precision, shard_units
from workbench.core.train.trainer.loop import Trainer
from workbench.core.train.trainer.strategy import SingleProcess

ROOT = Path(__file__).resolve().parents[4]
#: Seconds the 2-rank script may take (four runs, 32 steps in all; ~20 s on an idle 2-core machine).
RANKS_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def fsdp_runs(tmp_path_factory) -> tuple[Path, dict]:
    """Run ``fsdp_ranks.py`` once on 2 ranks; its folder and ``result.json``."""
    out = tmp_path_factory.mktemp("fsdp")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(Path(__file__).with_name("fsdp_ranks.py")), str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=RANKS_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, json.loads((out / "result.json").read_text())


@pytest.mark.slow
def test_two_ranks_shard_a_gpt2_train_and_resume_a_stopped_run_bit_exactly(fsdp_runs):
    out, result = fsdp_runs
    full, cut, resumed, resumed6 = result["full"], result["cut"], result["resumed"], result["resumed6"]
    assert result["steps"] == [10, 8, 10, 10]
    assert any("FSDP2: 2 blocks by _no_split_modules (GPT2Block) and the root sharded over 2 ranks" in line
               for line in result["lines"]), result["lines"]
    assert {k: full[k] for k in cut} == cut  # the same run, stopped after step 8
    assert sorted(resumed, key=int) == ["9", "10"]  # from the stop's synchronous write (step 8)
    assert sorted(resumed6, key=int) == ["7", "8", "9", "10"]  # from step 6's background write (dcp.async_save)
    assert {k: full[k] for k in resumed} == resumed  # bit-exact: every loss equal, not close
    assert {k: full[k] for k in resumed6} == resumed6
    assert result["same_shards"]  # every parameter shard of every rank equal to the uninterrupted run's
    assert result["freeze_applied"] and result["frozen_kept"]  # frozen mid-run: bit-identical since
    assert result["accumulated"]  # accumulate_grad_batches = 2 (one reduce-scatter a step) = a batch twice as big
    assert full["10"] < full["1"]


@pytest.mark.slow
def test_the_checkpoints_are_a_folder_of_shards_beside_a_small_file(fsdp_runs):
    out, result = fsdp_runs
    run = out / "full"
    for name in ("last", "best"):
        manifest = torch.load(run / f"{name}.pt", weights_only=True)
        assert manifest["sharded"] == f"{name}.dcp" and manifest["model_state_dict"] == {}
        assert (run / f"{name}.dcp" / ".metadata").is_file()
        assert len(list((run / f"{name}.dcp").glob("*.distcp"))) == 2  # one file of shards per rank
    last = torch.load(run / "last.pt", weights_only=True)
    assert last["step"] == 10 and last["sharded_world_size"] == 2 and manifest["step"] in (5, 10)
    assert not list(run.glob("*.new")) and not list(run.glob("*.old"))
    assert result["saved_to"] == str(out / "saved.pt")  # Save now, asked at step 4: applied by every rank
    # at the boundary after step 5 (rank 0's commands travel with the next step's all-reduce)
    assert torch.load(out / "saved.pt", weights_only=True)["step"] == 5 and (out / "saved.dcp" / ".metadata").is_file()
    init = torch.load(run / "init.pt", weights_only=True)["model_state_dict"]  # gathered: whole tensors
    assert tuple(init["transformer.wte.weight"].shape) == (256, 64)


@pytest.mark.slow
def test_what_a_sharded_run_cannot_resume_is_refused_in_one_line(fsdp_runs, tmp_path):
    out, result = fsdp_runs
    assert "resumes only its own sharded checkpoints" in result["refused_full"]
    # one process cannot resume a sharded checkpoint: it says how
    cfg = TrainConfig(run_dir=str(tmp_path / "one"), strategy="fsdp", tensorboard=False)
    trainer = Trainer(nn.Linear(2, 2), cfg, data=([(torch.randn(2, 2), torch.tensor([0, 1]))],) * 2)
    assert type(trainer.strategy) is SingleProcess  # no process group: one process trains alone
    manifest = torch.load(out / "full" / "last.pt", weights_only=True)
    with pytest.raises(TrainingError, match=r"sharded checkpoint.*strategy = \"fsdp\".*dcp_to_torch_save"):
        trainer.resume_from(manifest)


def test_shard_units_are_the_no_split_classes_else_the_repeated_blocks():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=3, n_embd=16, n_head=2, vocab_size=32, n_positions=8))
    units, rule = shard_units(gpt2)
    assert [n for n, _ in units] == ["transformer.h.0", "transformer.h.1", "transformer.h.2"]
    assert rule == "_no_split_modules (GPT2Block)"
    mlp = nn.Sequential(nn.Linear(4, 8), nn.Sequential(*[nn.Linear(8, 8) for _ in range(3)]), nn.Linear(8, 2))
    units, rule = shard_units(mlp)
    assert [n for n, _ in units] == ["1.0", "1.1", "1.2"] and rule == "repeated blocks (Linear)"
    assert shard_units(nn.Linear(2, 2))[0] == []


def test_mixed_precision_follows_amp():
    assert mixed_precision(TrainConfig(amp=False), torch.device("cpu")) is None
    policy = mixed_precision(TrainConfig(amp=True, amp_dtype="float16"), torch.device("cpu"))
    assert policy.param_dtype == torch.bfloat16 and policy.reduce_dtype == torch.float32  # CPU: bf16 always
    assert mixed_precision(TrainConfig(amp=True, amp_dtype="float16"), torch.device("cuda")).param_dtype == torch.float16


def test_the_strategy_key_is_checked():
    with pytest.raises(ValueError, match="strategy = 'zero3' is not one of auto, ddp, fsdp"):
        TrainConfig.from_dict({"strategy": "zero3"})
    assert TrainConfig.from_dict({"strategy": "fsdp"}).strategy == "fsdp"


@pytest.mark.slow
def test_a_sharded_last_pt_opens_with_both_ranks_shards_gathered(fsdp_runs):
    """File › Open of a sharded ``last.pt`` (``workbench.core.model.formats.sharded``): whole tensors, not shards."""
    from workbench.core.model.formats import read_checkpoint

    out, _ = fsdp_runs
    ck = read_checkpoint(out / "full" / "last.pt")
    init = torch.load(out / "full" / "init.pt", weights_only=True)["model_state_dict"]  # whole, gathered at start
    assert ck.metadata.extra["sharded"] == "last.dcp/ (2 ranks), gathered" and ck.metadata.global_step == 10
    assert {k: v.shape for k, v in ck.state_dict.items()} == {k: v.shape for k, v in init.items()}
    name = "transformer.h.1.mlp.c_fc.weight"  # trained all along: not the initial values
    assert torch.isfinite(ck.state_dict[name]).all() and not torch.equal(ck.state_dict[name], init[name])
