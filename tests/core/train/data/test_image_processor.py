"""A model's own image processor on an ImageFolder: classes from the folders, pixel values as the processor makes
them, and one line for a folder without one."""

from __future__ import annotations

import pickle

import pytest
import torch

from tests.core.train.image_models import colour_folder, tiny_vit_folder


from workbench.core.errors import DataError  # noqa: E402
from workbench.core.train.config import DataConfig  # noqa: E402
from workbench.core.train.data.datasets import build_datasets  # noqa: E402
from workbench.core.train.data.image_processor import image_classes, load_image_processor  # noqa: E402


def test_the_imagefolder_goes_through_the_processor(tmp_path):
    folder, images = tiny_vit_folder(tmp_path / "vit"), colour_folder(tmp_path / "images", per_class=(2, 1))
    cfg = DataConfig(dataset="imagefolder", root=str(images), processor=str(folder), num_workers=0)
    assert image_classes(cfg) == ["blue", "green", "red"]
    train, val, info = build_datasets(cfg)
    assert info.classes == ["blue", "green", "red"] and info.input_shape == (3, 32, 32)  # resized from 40
    x, y = val[0]
    from PIL import Image

    want = load_image_processor(folder)(images=Image.open(val.samples[0][0]).convert("RGB"),
                                        return_tensors="pt")["pixel_values"][0]
    assert torch.allclose(x, want) and x.min() < 0  # normalized to [-1, 1] (mean 0.5, std 0.5)
    assert pickle.loads(pickle.dumps(train.transform))(Image.open(train.samples[0][0])).shape == (3, 32, 32)


def test_a_folder_without_a_processor_names_the_missing_file(tmp_path):
    folder = tiny_vit_folder(tmp_path / "vit")
    (folder / "preprocessor_config.json").unlink()
    with pytest.raises(DataError, match=r"vit: no image processor in this folder \(preprocessor_config\.json is "
                                        r"missing\)"):
        load_image_processor(folder)
    (tmp_path / "one" / "cats").mkdir(parents=True)
    with pytest.raises(DataError, match="1 class subfolder"):
        image_classes(DataConfig(dataset="imagefolder", root=str(tmp_path / "one")))
