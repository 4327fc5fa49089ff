"""core/model/prefixes.py: wrapper prefixes removed, module versions kept."""

from __future__ import annotations

from collections import OrderedDict

import torch

from workbench.core.model.prefixes import common_leading, strip_prefixes


def test_wrappers_are_stripped_and_the_metadata_follows():
    sd = OrderedDict({"module._orig_mod.fc.weight": torch.zeros(1), "module._orig_mod.fc.bias": torch.zeros(1)})
    sd._metadata = {"": {"version": 1}, "module": {}, "module._orig_mod": {}, "module._orig_mod.fc": {"version": 3}}
    out, stripped = strip_prefixes(sd)
    assert list(out) == ["fc.weight", "fc.bias"] and stripped == ["module.", "_orig_mod."]
    assert out._metadata["fc"] == {"version": 3} and set(out._metadata) == {"", "fc"}


def test_a_leading_wrapper_is_stripped_only_when_it_matches():
    sd = {"model.fc.weight": torch.zeros(1)}
    assert strip_prefixes(sd)[1] == []
    out, stripped = strip_prefixes(sd, ["fc.weight"])
    assert list(out) == ["fc.weight"] and stripped == ["model."]
    assert common_leading(["a.b.c", "a.b.d", "e"], depth=2) == ["a.", "a.b."]
