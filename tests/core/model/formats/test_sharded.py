"""An FSDP run's sharded ``last.pt`` opens with its model gathered from ``last.dcp/`` (real DCP folders).

The folder here is written by ``torch.distributed.checkpoint.save`` in one process (one ``.distcp`` file) with
the layout the trainer's ``ShardedCheckpoints`` uses; a 2-rank folder is opened in
``tests/core/train/trainer/test_fsdp.py`` (its session's run, not a second one).
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import warnings

import pytest
import torch

from workbench import cli
from workbench.core.errors import CheckpointError
from workbench.core.files import atomic_save
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.formats import read_checkpoint
from workbench.core.model.formats.sharded import gather_model_state
from workbench.core.model.saving import checkpoint_payload


def _sharded(folder, model=None):
    """A trainer-shaped sharded checkpoint of a trained DigitsCNN in ``folder``: ``last.pt`` + ``last.dcp/``."""
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(0)
    model = model or DigitsCNN()
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 1, 8, 8)).sum().backward()
    opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ... a single process"
        dcp.save({"model": model.state_dict(), "optim": opt.state_dict()}, checkpoint_id=str(folder / "last.dcp"),
                 no_dist=True)
    payload = checkpoint_payload(model, arch={"name": "digits_cnn", "kwargs": {}}, epoch=2, step=7)
    payload.update(model_state_dict={}, sharded="last.dcp", sharded_world_size=1)
    atomic_save(payload, folder / "last.pt")
    return model


def test_a_sharded_last_pt_opens_with_the_gathered_model(tmp_path, capsys):
    model = _sharded(tmp_path)
    ck = read_checkpoint(tmp_path / "last.pt")
    assert ck.state_dict.keys() == model.state_dict().keys()
    assert all(torch.equal(ck.state_dict[k], v) for k, v in model.state_dict().items())
    assert ck.metadata.global_step == 7 and ck.metadata.extra["sharded"] == "last.dcp/ (1 ranks), gathered"
    assert ck.metadata.verified  # the .pt's own digest
    # the open policy (what File › Open and `workbench inspect` use) builds the architecture and loads it
    assert cli.main(["inspect", str(tmp_path / "last.pt"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["total_params"] == sum(p.numel() for p in model.parameters())


def test_a_missing_folder_or_a_foreign_plan_is_one_line(tmp_path):
    _sharded(tmp_path)
    plan = (tmp_path / "last.dcp" / ".metadata").read_bytes()
    (tmp_path / "last.dcp" / ".metadata").rename(tmp_path / "plan")
    with pytest.raises(CheckpointError, match=r"last.pt: is the small part of a sharded \(FSDP\) checkpoint") as e:
        read_checkpoint(tmp_path / "last.pt")
    assert "\n" not in str(e.value)
    # a plan that would run code is refused, and nothing runs

    class Boom:
        def __reduce__(self):
            return (exec, ("raise SystemExit('ran')",))

    (tmp_path / "last.dcp" / ".metadata").write_bytes(pickle.dumps(Boom()))
    with pytest.raises(CheckpointError, match=r"builtins.exec.*dcp_to_torch_save"):
        read_checkpoint(tmp_path / "last.pt")
    # a shard file named outside the folder
    outside = pickle.loads(plan)  # our own file: the test's plain pickle is safe here
    outside.storage_data = {k: dataclasses.replace(v, relative_path="../x.distcp")
                            for k, v in outside.storage_data.items()}
    (tmp_path / "last.dcp" / ".metadata").write_bytes(pickle.dumps(outside))
    with pytest.raises(CheckpointError, match="outside its folder"):
        gather_model_state(tmp_path / "last.dcp")
    # a damaged shard (its bytes overwritten), then a truncated one (fewer bytes than the plan's model)
    (tmp_path / "last.dcp" / ".metadata").write_bytes(plan)
    shard = next((tmp_path / "last.dcp").glob("*.distcp"))
    data = shard.read_bytes()
    shard.write_bytes(b"\0" * len(data))
    with pytest.raises(CheckpointError, match="shards cannot be gathered.*dcp_to_torch_save"):
        read_checkpoint(tmp_path / "last.pt")
    shard.write_bytes(data[:100])
    with pytest.raises(CheckpointError, match="bytes of model tensors but its shard files hold 100; .*incomplete"):
        read_checkpoint(tmp_path / "last.pt")
