"""Module calls found in an exported graph's scopes, recorded with hooks, and the first that differs."""

from __future__ import annotations

import torch
from torch import nn

from workbench.core.export.divergence import ScopedNode, first_difference, module_outputs, record_module_outputs


def test_a_call_is_a_run_of_nodes_and_its_output_the_last_value_read_outside():
    nodes = [
        ScopedNode(("block", "block.conv"), ("x",), ("c",)),
        ScopedNode(("block", "block.relu"), ("c",), ("r1",)),
        ScopedNode((), ("r1",), ("shape",)),  # no scope (the optimizer's): neither starts nor ends a call
        ScopedNode(("block",), ("r1", "x"), ("sum", "unused")),
        ScopedNode(("block", "block.relu"), ("sum",), ("r2",)),
        ScopedNode(("head",), ("r2",), ("y",)),
    ]
    found = module_outputs(nodes, ["y"])
    assert found[("block.conv", 0)] == "c"
    assert (found[("block.relu", 0)], found[("block.relu", 1)]) == ("r1", "r2")  # a module used twice: two calls
    assert found[("block", 0)] == "r2" and found[("head", 0)] == "y"
    assert ("block", 1) not in found


def test_hooks_record_every_call_cloned_in_call_end_order():
    relu = nn.ReLU(inplace=True)
    model = nn.Sequential(nn.Linear(3, 3), relu, nn.Sequential(nn.Linear(3, 3), relu))
    calls = record_module_outputs(model.eval(), lambda m: m(torch.randn(2, 3)))
    assert [(c.path, c.call) for c in calls] == [("0", 0), ("1", 0), ("2.0", 0), ("1", 1), ("2", 0)]
    assert calls[0].output.data_ptr() != calls[1].output.data_ptr()  # the in-place ReLU did not change "0"'s record
    assert not any(m._forward_hooks for m in model.modules())  # hooks removed


def test_the_first_difference_names_what_had_no_value_before_it():
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3))
    calls = record_module_outputs(model.eval(), lambda m: m(torch.randn(2, 3)))
    values = {("0", 0): calls[0].output.clone(), ("2", 0): calls[2].output + 0.1}  # no value for "1"
    diff = first_difference(calls, values)
    assert (diff.module, diff.type, diff.not_compared, diff.compared) == ("2", "Linear", ["1"], 1)
    assert first_difference(calls, {("2", 0): calls[2].output.numpy()}) is None
