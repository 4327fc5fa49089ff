"""A local trap for the network: a socket on 127.0.0.1 that counts the connections made to it.

Used as ``HF_ENDPOINT`` and ``HTTP(S)_PROXY`` of a subprocess (a fresh
environment, so huggingface_hub reads them when it is imported): any request
that Hugging Face Hub, transformers or timm code makes reaches the trap, which
records its first line and closes the connection (the request fails at once, so
a test that fails does so quickly).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from pathlib import Path
from typing import Iterator

__all__ = ["NetworkTrap", "network_trap", "fresh_env", "HUB_NAMING_CONFIGS", "hub_naming_folder", "bert_folder"]

#: Configs that make the installed transformers 5 reach the Hub when it builds them (each seen on the trap
#: before the fix): name -> (config.json, the key the refusal names).
HUB_NAMING_CONFIGS = {
    # RF-DETR's config asks the Hub whether a backbone name is a repo (``repo_exists``) when it has no backbone_config
    "rf_detr_backbone_repo": ({"model_type": "rf_detr", "architectures": ["RfDetrForObjectDetection"],
                               "backbone": "org/repo", "use_pretrained_backbone": True}, "backbone"),
    # TimmWrapper builds ``timm.create_model(architecture)``: an ``hf-hub:`` name fetches the repo's config.json
    "timm_wrapper_hub_architecture": ({"model_type": "timm_wrapper",
                                       "architectures": ["TimmWrapperForImageClassification"],
                                       "architecture": "hf-hub:org/repo", "num_classes": 3, "num_labels": 3},
                                      "architecture"),
    # the same key in a sub-config: the encoder-decoder config builds its encoder's config
    "nested_backbone_repo": ({"model_type": "encoder-decoder", "architectures": ["EncoderDecoderModel"],
                              "encoder": {"model_type": "rf_detr", "backbone": "org/repo"},
                              "decoder": {"model_type": "bert"}}, "encoder.backbone"),
    # a plain name no list of keys knows as remote: RF-DETR still asks the Hub (the offline build refuses it)
    "rf_detr_backbone_name": ({"model_type": "rf_detr", "architectures": ["RfDetrForObjectDetection"],
                               "backbone": "resnet50"}, None),
}


def hub_naming_folder(root: Path, name: str) -> Path:
    """``root/name``: the config of :data:`HUB_NAMING_CONFIGS` beside a one-tensor ``model.safetensors``."""
    import torch
    from safetensors.torch import save_file

    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(HUB_NAMING_CONFIGS[name][0]))
    save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))
    return folder


def bert_folder(root: Path) -> Path:
    """``root/bert``: a small random BertForSequenceClassification saved by ``save_pretrained``."""
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                  vocab_size=100, max_position_embeddings=64, num_labels=3)
    folder = root / "bert"
    transformers.BertForSequenceClassification(cfg).save_pretrained(folder)
    return folder

#: Variables that would let a child skip the trap or go offline by itself: the test proves Workbench sets them.
_CLEARED = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "NO_PROXY", "no_proxy", "HF_HUB_DISABLE_TELEMETRY")


class NetworkTrap:
    """The trap's port and what reached it (``requests``: the first line of each connection)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.requests: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:  # the accept timeout: check the stop flag
                continue
            with conn:
                conn.settimeout(1.0)
                try:
                    head = conn.recv(200)
                except OSError:
                    head = b""
                self.requests.append(head.split(b"\r\n", 1)[0].decode("latin-1") or "(connection)")

    def env(self) -> dict[str, str]:
        """This process's environment with the Hub endpoint and every proxy pointed at the trap."""
        url = f"http://127.0.0.1:{self.port}"
        env = fresh_env()
        env.update(HF_ENDPOINT=url, HTTP_PROXY=url, HTTPS_PROXY=url, http_proxy=url, https_proxy=url,
                   ALL_PROXY=url, all_proxy=url)
        return env

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


def fresh_env() -> dict[str, str]:
    """``os.environ`` without the offline switches and proxy exceptions (the child decides those itself)."""
    env = dict(os.environ)
    for name in _CLEARED:
        env.pop(name, None)
    return env


@contextlib.contextmanager
def network_trap() -> Iterator[NetworkTrap]:
    """A running :class:`NetworkTrap`, closed after the block."""
    trap = NetworkTrap()
    try:
        yield trap
    finally:
        trap.close()
