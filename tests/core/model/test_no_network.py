"""Nothing in a model folder makes Workbench touch the network (issue 45, "Network without trust").

A config that names a model elsewhere -- a ``backbone`` repo id that
transformers asks the Hub about, an ``hf-hub:`` timm name that TimmWrapper
fetches -- is refused in one line naming the file and the key, in bounded time;
any other Hub request a build would make fails offline and is refused the same
way. The core API is tried in a subprocess (a fresh environment: huggingface_hub
reads its endpoint when it is imported) whose Hub endpoint and proxies are a
local trap socket that counts connections; the subprocess is not told to be
offline: the builders are, by themselves.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.core.model.network_trap import HUB_NAMING_CONFIGS, bert_folder, fresh_env, hub_naming_folder, network_trap
from workbench.core.hub_offline import OFFLINE_VARIABLES, offline_by_default
from workbench.core.model.formats.model_folder import remote_name

pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[3]

#: Opens each folder given through the core API; one JSON line per folder: ok, or the error's type and message.
_OPEN_EACH = """
import json, sys
from workbench.core.model.opening import open_model
for path in sys.argv[1:]:
    try:
        open_model(path)
        print(json.dumps({"ok": True}), flush=True)
    except Exception as exc:
        print(json.dumps({"ok": False, "type": type(exc).__name__, "error": str(exc)}), flush=True)
"""


def test_open_model_refuses_hub_names_and_never_reaches_the_network(tmp_path):
    names = list(HUB_NAMING_CONFIGS)
    folders = [hub_naming_folder(tmp_path, name) for name in names] + [bert_folder(tmp_path)]
    with network_trap() as trap:
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-c", _OPEN_EACH, *map(str, folders)], env=trap.env(), cwd=REPO,
                              capture_output=True, text=True, timeout=60)
        elapsed = time.monotonic() - start
    assert trap.requests == [], trap.requests
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert len(results) == len(folders), proc.stdout
    for name, folder, result in zip(names, folders, results):
        key = HUB_NAMING_CONFIGS[name][1]
        assert not result["ok"], name
        assert result["type"] in ("CheckpointError", "ArchitectureError"), result
        message = result["error"]
        assert "\n" not in message and "Workbench never downloads" in message, message
        assert message.startswith(f"{folder / 'config.json'}: "), message
        assert message.split(": ", 1)[1].startswith(f"{key} = " if key else "backbone = 'resnet50'"), message
    assert results[-1] == {"ok": True}  # a plain folder still opens
    assert elapsed < 30


@pytest.mark.parametrize("config", [
    {"model_type": "detr", "backbone": "resnet50", "use_timm_backbone": True, "use_pretrained_backbone": True},
    {"architecture": "resnet18", "num_classes": 10,
     "pretrained_cfg": {"hf_hub_id": "timm/resnet18.a1_in1k", "architecture": "resnet18"}},
    {"model_type": "bert", "_name_or_path": "google-bert/bert-base-uncased", "architectures": ["BertModel"]},
])
def test_configs_of_real_folders_name_nothing_remote(config):
    """A timm registry name as backbone, timm's hub id in pretrained_cfg, ``_name_or_path``: built offline as is."""
    assert remote_name(config) is None


@pytest.mark.parametrize(("config", "key"), [
    ({"backbone": "org/repo"}, "backbone"),
    ({"architecture": "HF-HUB:org/repo"}, "architecture"),
    ({"model_args": {"pretrained_cfg": "hf_hub:org/repo"}}, "model_args.pretrained_cfg"),
    ({"text_config": {"a": [{"backbone": "org/repo"}]}}, "text_config.a[0].backbone"),
    ({"architecture": "local-dir:/etc"}, "architecture"),
])
def test_remote_name_names_the_key(config, key):
    message = remote_name(config)
    assert message is not None and message.startswith(f"{key} = ")


def test_offline_by_default_keeps_what_the_user_set():
    env: dict[str, str] = {}
    offline_by_default(env)
    assert env == OFFLINE_VARIABLES
    env = {"HF_HUB_OFFLINE": "0"}
    offline_by_default(env)
    assert env == {"HF_HUB_OFFLINE": "0"}  # the user's choice wins, and the other one is not set behind it


def test_import_workbench_and_attach_leave_the_environment_alone():
    code = ("import os, workbench; workbench.attach; workbench.connect; "
            "print([n for n in ('HF_HUB_OFFLINE', 'TRANSFORMERS_OFFLINE') if n in os.environ])")
    proc = subprocess.run([sys.executable, "-c", code], env=fresh_env(), cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"
