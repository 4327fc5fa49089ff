"""`workbench contributions`: what builds by name, an installed package's included, without importing it."""

from __future__ import annotations

import json
import sys

from workbench import cli


def test_contributions_lists_an_installed_package_without_importing_it(example_plugin, capsys, monkeypatch):
    monkeypatch.delitem(sys.modules, "workbench_example_plugin", raising=False)
    assert cli.main(["contributions", "architectures"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["architecture", "digits_cnn", "builtin"]
    assert lines[1].split() == ["architecture", "tabular_mlp", "builtin"]
    assert lines[2].split() == ["architecture", "tiny_mlp", "workbench-example-plugin", example_plugin.version]
    assert ["architecture", "resnet18", "torchvision"] in [line.split() for line in lines]
    assert "workbench_example_plugin" not in sys.modules
    assert cli.main(["contributions", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"kind": "probe", "name": "live_probes", "target": "workbench.core.probe.callback:ProbeCallback",
            "source": "builtin"} in rows
    assert {r["kind"] for r in rows} == {"architecture", "probe"}  # no dataset, step or metric is registered yet
    assert cli.main(["contributions", "models"]) == 2
    assert "'models' is not a kind: give one of architecture, dataset, step, metric, loss, probe" in capsys.readouterr().err
