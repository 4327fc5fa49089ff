"""Image classification without code: a bare ``ViTModel`` folder with its image processor gets a head sized to an
ImageFolder's classes, learns colour-coded images from a run file, and exports a folder transformers loads."""

from __future__ import annotations

import csv
import shutil

import pytest
import torch

from tests.core.train.image_models import COLOURS, colour_folder, tiny_vit_folder

import transformers  # noqa: E402 - in the test extra: fails if missing, never skips

from workbench.core.train.launch.headless import trainer_from_toml  # noqa: E402

#: Validation accuracy the run must reach (chance 1/3; measured 1.0 after 1 epoch of 2 on these images).
MIN_ACC = 0.8


def _run_file(tmp_path, folder, images, out):
    run = tmp_path / f"{out}.toml"
    run.write_text(f"""epochs = 3
optimizer = "adamw"
lr = 0.002
seed = 0
tensorboard = false
run_dir = "{tmp_path / out}"
[model]
checkpoint = "{folder}"
[task]
kind = "image_classification"
[data]
dataset = "imagefolder"
root = "{images}"
batch_size = 12
num_workers = 0
""")
    return run


@pytest.fixture(scope="module")
def vit_run(tmp_path_factory):
    """A finished run of the bare ViT on the colour folder: ``(tmp_path, trainer, lines)`` (shared: ~5 s)."""
    tmp_path = tmp_path_factory.mktemp("vit")
    folder, images = tiny_vit_folder(tmp_path / "vit"), colour_folder(tmp_path / "images")
    lines: list[str] = []
    torch.manual_seed(0)
    trainer = trainer_from_toml(_run_file(tmp_path, folder, images, "out"), out=lines.append)
    assert trainer is not None, lines
    assert trainer.fit() == "completed", lines
    return tmp_path, trainer, lines


def test_a_bare_vit_learns_the_colour_classes(vit_run):
    tmp_path, trainer, lines = vit_run
    assert any("ViTModel -> ViTForImageClassification" in line for line in lines), lines
    assert isinstance(trainer.model, transformers.ViTForImageClassification)
    assert trainer.model.config.id2label == dict(enumerate(sorted(COLOURS)))
    rows = list(csv.DictReader(open(tmp_path / "out" / "metrics.csv")))
    assert float(rows[-1]["val_acc"]) >= MIN_ACC, rows
    assert rows[-1]["val_f1"] not in ("", "nan"), rows


def test_the_exported_folder_loads_with_its_labels_and_processor(vit_run, tmp_path):
    from workbench.cli import main

    run_tmp, trainer, _ = vit_run
    assert main(["export", str(run_tmp / "out" / "last.pt"), "--format", "hf", "--out", str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "preprocessor_config.json").is_file()
    back = transformers.AutoModelForImageClassification.from_pretrained(str(tmp_path / "hf")).eval()
    assert back.config.id2label == {0: "blue", 1: "green", 2: "red"}
    processor = transformers.AutoImageProcessor.from_pretrained(str(tmp_path / "hf"), local_files_only=True)
    from PIL import Image

    image = Image.open(next((run_tmp / "images" / "val" / "red").iterdir()))
    x = processor(images=image.convert("RGB"), return_tensors="pt")["pixel_values"]
    assert x.shape == (1, 3, 32, 32)  # the processor's resize from 40 pixels
    with torch.no_grad():
        model = trainer.model.eval()
        assert torch.allclose(back(x).logits, model(x.to(next(model.parameters()).device)).logits.cpu(), atol=1e-5)


def test_a_folder_without_an_image_processor_is_one_line_and_no_run(tmp_path):
    folder = tiny_vit_folder(tmp_path / "vit")
    (folder / "preprocessor_config.json").unlink()
    images = colour_folder(tmp_path / "images", per_class=(2, 1))
    lines: list[str] = []
    assert trainer_from_toml(_run_file(tmp_path, folder, images, "out"), out=lines.append) is None
    assert len(lines) == 1 and "preprocessor_config.json is missing" in lines[0] and str(folder) in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_propose_task_for_vision_models():
    from workbench.core.train.task.from_model import propose_task

    config = transformers.ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1,
                                    num_attention_heads=2, intermediate_size=64)
    headed = propose_task(transformers.ViTForImageClassification(config))
    assert (headed.kind, headed.head, headed.dataset) == ("image_classification", "present", "imagefolder")
    vit = transformers.ViTModel(config)
    bare = propose_task(vit)
    assert (bare.kind, bare.head, bare.head_class) == ("image_classification", "add", "ViTForImageClassification")
    from workbench.core.model.spec import ArchSpec
    from workbench.core.train.task.from_model import add_task_head

    spec = ArchSpec("workbench.core.model.hf_build:build_hf_model",
                    {"architecture": "ViTModel", "config_json": config.to_json_string()})
    model, _, _, note = add_task_head(vit, spec, "image_classification", ["cat", "dog", "fox"])  # the window's
    assert type(model).__name__ == "ViTForImageClassification" and "head for 3 classes" in note
    assert model.config.id2label == {0: "cat", 1: "dog", 2: "fox"} and model.classifier.out_features == 3
    assert all(torch.equal(a, model.vit.state_dict()[k]) for k, a in vit.state_dict().items()
               if k in model.vit.state_dict())


def test_a_headed_folder_keeps_its_head_class_resized_to_the_classes(tmp_path):
    from workbench.core.train.config import TrainConfig
    from workbench.core.train.task.from_model import model_for_task

    folder = tiny_vit_folder(tmp_path / "vit", head=True)  # 2 labels; the folder has 3 classes
    images = colour_folder(tmp_path / "images", per_class=(1, 1))
    shutil.rmtree(images / "val")  # root itself split by val_fraction: classes from root
    cfg = TrainConfig.from_toml(_run_file(tmp_path, folder, images / "train", "out"))
    model, spec = model_for_task(cfg, tmp_path)
    assert type(model).__name__ == "ViTForImageClassification" and model.classifier.out_features == 3
    assert cfg.data.processor == str(folder.resolve()) and "ViTForImageClassification" in str(spec)


def test_the_run_folder_has_the_confusion_matrix_report_and_worst_rows(vit_run):
    import json

    tmp_path, trainer, _ = vit_run
    out = tmp_path / "out"
    evaluations = list(csv.DictReader(open(out / "metrics.csv")))
    confusion = [json.loads(line) for line in (out / "confusion.jsonl").read_text().splitlines()]
    assert len(confusion) == len(evaluations)  # one per evaluation, none from the pre-flight batches
    assert [c["epoch"] for c in confusion] == [int(r["epoch"]) for r in evaluations]
    last = confusion[-1]
    assert last["labels"] == ["blue", "green", "red"] and last["step"] == int(evaluations[-1]["step"])
    matrix = torch.tensor(last["matrix"])
    assert matrix.shape == (3, 3) and matrix.sum(1).tolist() == [6, 6, 6]  # rows: the true classes
    assert float(matrix.diag().sum()) / 18 == pytest.approx(float(evaluations[-1]["val_acc"]))
    report = json.loads((out / "class_report.json").read_text())
    assert set(report["classes"]) == {"blue", "green", "red"}
    assert all(c["support"] == 6 and 0 <= c["f1"] <= 1 for c in report["classes"].values())
    assert report["accuracy"] == pytest.approx(float(evaluations[-1]["val_acc"]), abs=1e-4)
    worst = [json.loads(line) for line in (out / "worst_rows.jsonl").read_text().splitlines()]
    assert len(worst) == 10 * len(evaluations)
    final = [w for w in worst if w["step"] == last["step"]]
    assert [w["loss"] for w in final] == sorted((w["loss"] for w in final), reverse=True)
    for w in final:
        assert w["text"].endswith(".png") and f"/val/{w['true']}/" in w["text"], w
        assert w["predicted"] in COLOURS and 0 < w["confidence"] <= 1
