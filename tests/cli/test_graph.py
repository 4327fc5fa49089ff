"""``workbench graph``: a saved checkpoint to .json, .svg and .png; a model folder's own example; exit codes."""

from __future__ import annotations

import struct
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch
import torchvision
import transformers

from workbench import cli
from workbench.core.graph import ModelGraph
from workbench.core.model.demo import DigitsCNN
from workbench.ui.graph import image_file

REPO = Path(__file__).resolve().parents[2]
SVG = "{http://www.w3.org/2000/svg}"
TOP = ["x", "conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4", "avgpool", "flatten", "fc"]


@pytest.fixture(scope="module")
def resnet18_file(tmp_path_factory) -> Path:
    """A real torchvision resnet18 state_dict saved with torch.save."""
    path = tmp_path_factory.mktemp("ckpt") / "resnet18.pth"
    torch.save(torchvision.models.resnet18().state_dict(), path)
    return path


def test_json_of_a_saved_resnet18(resnet18_file, tmp_path, capsys):
    out = tmp_path / "graph.json"
    code = cli.main(["graph", str(resnet18_file), "--arch", "resnet18", "--input-shape", "1,3,64,64",
                     "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    graph = ModelGraph.from_json(out.read_text())
    assert graph.method == "export" and len(graph.nodes) == 70
    assert graph.node("x").shapes == [(1, 3, 64, 64)] and graph.node(graph.outputs[0]).shapes == [(1, 1000)]
    assert capsys.readouterr().out.startswith(f"{out}: 70 nodes, 77 edges, captured with export")


def test_svg_collapsed_to_the_top_level(resnet18_file, tmp_path, capsys):
    out = tmp_path / "graph.svg"
    assert cli.main(["graph", str(resnet18_file), "--arch", "resnet18", "--input-shape", "1,3,64,64",
                     "--expand", "1", "--out", str(out)]) == 0
    root = ET.parse(out).getroot()
    assert [g.get("id") for g in root.iter(f"{SVG}g") if g.get("class") == "node"] == TOP
    assert len([p for p in root.iter(f"{SVG}polyline")]) == len(TOP) - 1


def test_png_in_a_fresh_process(resnet18_file, tmp_path):
    svg, png = tmp_path / "graph.svg", tmp_path / "graph.png"
    base = [sys.executable, "-m", "workbench", "graph", str(resnet18_file), "--arch", "resnet18",
            "--input-shape", "1,3,64,64", "--expand", "2"]
    for out in (svg, png):
        proc = subprocess.run([*base, "--out", str(out)], capture_output=True, text=True, cwd=REPO, timeout=300)
        assert proc.returncode == 0, proc.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    root = ET.parse(svg).getroot()
    assert (width, height) == (round(float(root.get("width"))), round(float(root.get("height"))))
    assert height > width > 100  # a layered drawing: taller than wide
    assert len(data) > 10_000  # boxes and text, not a blank image


def test_a_hugging_face_folder_uses_its_own_example(tmp_path, capsys):
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, vocab_size=100, max_position_embeddings=64, num_labels=3)
    folder = tmp_path / "bert"
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    out = tmp_path / "bert.json"
    assert cli.main(["graph", str(folder), "--expand", "2", "--out", str(out)]) == 0, capsys.readouterr().err
    graph = ModelGraph.from_json(out.read_text())
    assert "input_ids" in graph.inputs and graph.node("input_ids").dtypes == ["int64"]
    assert [n.name for n in graph.nodes if n.op == "module"][:2] == ["bert.embeddings", "bert.encoder"]


def test_exit_codes_name_the_problem(resnet18_file, tmp_path, capsys):
    args = ["graph", str(resnet18_file), "--arch", "resnet18"]
    assert cli.main([*args, "--input-shape", "1,3,64,64", "--out", str(tmp_path / "g.txt")]) == 2
    assert "g.txt: cannot write a .txt file" in capsys.readouterr().err
    assert cli.main([*args, "--out", str(tmp_path / "g.json")]) == 2
    assert "give --input-shape" in capsys.readouterr().err
    assert cli.main([*args, "--input-shape", "1,3,64,64", "--expand", "some", "--out", "g.json"]) == 2
    assert "neither 'all' nor a whole number" in capsys.readouterr().err
    assert cli.main([*args, "--input-shape", "1,5,64,64", "--out", str(tmp_path / "g.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: could not capture the graph of ResNet") and "torch.export" in err
    assert cli.main(["graph", str(tmp_path / "missing.pth"), "--out", str(tmp_path / "g.json")]) == 1
    assert "missing.pth" in capsys.readouterr().err
    assert not (tmp_path / "g.json").exists()
    assert "graph" in cli.COMMANDS


def test_svg_and_png_go_through_the_graph_tabs_image_writer(tmp_path, capsys, monkeypatch):
    """One image writer: ``--out`` .svg and .png are written by ``image_file.write_graph_image``, as the tab's are."""
    path = tmp_path / "digits.pt"
    torch.save(DigitsCNN().state_dict(), path)
    written = []
    real = image_file.write_graph_image
    monkeypatch.setattr(image_file, "write_graph_image", lambda out, svg, **kw: written.append(out) or real(out, svg, **kw))
    for name in ("d.svg", "d.png", "d.json"):
        assert cli.main(["graph", str(path), "--arch", "digits_cnn", "--input-shape", "1,1,8,8",
                         "--out", str(tmp_path / name)]) == 0, capsys.readouterr().err
    assert written == [tmp_path / "d.svg", tmp_path / "d.png"]  # the JSON is the graph's own, written by core
    assert (tmp_path / "d.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.json", "d.png", "d.svg", "digits.pt"]  # no temp left


def test_a_failed_write_leaves_no_partial_file(tmp_path, capsys, monkeypatch):
    path = tmp_path / "digits.pt"
    torch.save(DigitsCNN().state_dict(), path)
    (tmp_path / "old.png").write_bytes(b"the previous image")

    def refuse(src, dst):
        raise OSError(28, "No space left on device", str(dst))

    monkeypatch.setattr("workbench.core.files.os.replace", refuse)
    for name in ("new.svg", "new.png", "old.png"):
        assert cli.main(["graph", str(path), "--arch", "digits_cnn", "--input-shape", "1,1,8,8",
                         "--out", str(tmp_path / name)]) == 1
        assert "No space left on device" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digits.pt", "old.png"]
    assert (tmp_path / "old.png").read_bytes() == b"the previous image"
