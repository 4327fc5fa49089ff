"""A real batch of the chosen dataset as a model's example input."""

from __future__ import annotations

from pathlib import Path

import torch

from workbench.core.train.config import DataConfig, TaskConfig, TrainConfig
from workbench.core.train.data.example_batch import example_batch, model_input

EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


def test_digits_give_their_images():
    batch = example_batch(TrainConfig(data=DataConfig(dataset="digits")), n=3)
    x = model_input(batch)
    assert x.shape == (3, 1, 8, 8) and x.dtype == torch.float32


def test_a_user_dataset_of_token_id_dicts_gives_the_ids_without_the_label():
    cfg = TrainConfig(data=DataConfig(dataset=f"{EXAMPLES}/text/text_task.py:make_dataset", kwargs={"n": 40}))
    x = model_input(example_batch(cfg))
    assert set(x) == {"input_ids"} and x["input_ids"].dtype == torch.int64 and x["input_ids"].shape == (2, 24)


def test_a_model_loss_batch_keeps_its_labels():
    cfg = TrainConfig(data=DataConfig(dataset=f"{EXAMPLES}/own_loss/hf_style.py:make_dataset"),
                      task=TaskConfig(kind="model_loss"))
    x = model_input(example_batch(cfg), "model_loss")
    assert set(x) == {"input_ids", "labels"}


def test_a_csv_gives_its_standardised_features():
    cfg = TrainConfig(data=DataConfig(dataset="csv", root=str(EXAMPLES / "tabular" / "diabetes.csv"),
                                      target=["progression"]))
    x = model_input(example_batch(cfg, n=4))
    assert x.shape == (4, 10) and x.dtype == torch.float32
