"""Validation metrics (workbench.core.train.task.metrics): accumulated over batches, checked against direct
computations on the whole epoch (scikit-learn's where it has one), and NaN where a metric does not apply.
The regression, F1, mAP and top-5 checks against scikit-learn are in test_tasks.py."""

from __future__ import annotations

import math

import pytest
import torch
from sklearn.metrics import accuracy_score, mean_squared_error

from workbench.core.train.task.metrics import (
    BUILTIN_METRICS,
    DEFAULT_METRICS,
    Mean,
    build_metric,
    column,
)


def batches(n: int, classes: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits, target = torch.randn(n, classes, generator=g), torch.randint(0, classes, (n,), generator=g)
    return logits, target


def test_accuracy_over_uneven_batches_equals_that_of_the_whole_epoch():
    logits, target = batches(100, 4)
    acc = build_metric("accuracy")
    for part in (slice(0, 13), slice(13, 64), slice(64, 100)):
        acc.update(logits[part], target[part], part.stop - part.start)
    assert acc.compute() == pytest.approx(accuracy_score(target.numpy(), logits.argmax(1).numpy()))
    column_target = build_metric("accuracy")
    column_target.update(logits, target[:, None], 100)  # (N, 1) class indices read as (N,)
    assert column_target.compute() == acc.compute()


def test_accuracy_of_a_batch_that_is_not_classification_is_nan_for_the_epoch():
    acc = build_metric("accuracy")
    logits, target = batches(8, 3)
    acc.update(logits, target, 8)
    acc.update(logits, target.float(), 8)  # float targets: regression
    acc.update(logits, target, 8)
    assert math.isnan(acc.compute())
    assert math.isnan(build_metric("accuracy").compute())  # no batch at all


def test_top_k_counts_a_target_among_the_k_largest_logits():
    logits = torch.tensor([[0.0, 1, 2, 3, 4, 5, 6], [6.0, 5, 4, 3, 2, 1, 0], [0.0, 0, 0, 0, 0, 0, 9]])
    top5 = build_metric("top5")
    top5.update(logits, torch.tensor([0, 0, 6]), 3)  # not in the top 5, in it, in it
    assert top5.compute() == pytest.approx(2 / 3) and top5.name == "top5"


def test_rmse_and_mae_of_a_multi_column_target():
    g = torch.Generator().manual_seed(2)
    target, output = torch.randn(30, 3, generator=g), torch.randn(30, 3, generator=g)
    rmse, mae = build_metric("rmse"), build_metric("mae")
    for part in (slice(0, 7), slice(7, 30)):
        rmse.update(output[part], target[part], part.stop - part.start)
        mae.update(output[part], target[part], part.stop - part.start)
    expected = math.sqrt(mean_squared_error(target.double().numpy(), output.double().numpy()))
    assert rmse.compute() == pytest.approx(expected, rel=1e-9)
    assert mae.compute() == pytest.approx((output - target).abs().double().mean().item(), rel=1e-9)


def test_regression_of_mismatched_sizes_and_r2_of_constant_targets_are_nan():
    mae = build_metric("mae")
    mae.update(torch.zeros(4, 2), torch.zeros(4), 4)
    assert math.isnan(mae.compute())
    r2 = build_metric("r2")
    r2.update(torch.randn(5), torch.full((5,), 2.0), 5)  # the targets do not vary: SS_tot is 0
    assert math.isnan(r2.compute())
    one = build_metric("r2")
    one.update(torch.ones(1), torch.zeros(1), 1)
    assert math.isnan(one.compute())


def test_f1_with_no_positive_anywhere_is_nan_and_a_perfect_one_is_1():
    f1 = build_metric("f1")
    f1.update(torch.full((3, 4), -1.0), torch.zeros(3, 4), 3)
    assert math.isnan(f1.compute())
    perfect = build_metric("f1")
    target = torch.tensor([[1.0, 0, 1], [0, 1, 0]])
    perfect.update(4 * target - 2, target, 2)
    assert perfect.compute() == 1.0
    wrong_shape = build_metric("f1")
    wrong_shape.update(torch.zeros(2, 3), torch.zeros(2), 2)
    assert math.isnan(wrong_shape.compute())


def test_map_of_mismatched_shapes_is_nan():
    ap = build_metric("map")
    ap.update(torch.zeros(2, 3), torch.zeros(2, 4), 2)
    assert math.isnan(ap.compute()) and math.isnan(build_metric("map").compute())


def test_a_user_metric_is_the_sample_weighted_mean_of_its_batch_values():
    m = build_metric("iou", lambda out, target: (out == target).float().mean())
    assert isinstance(m, Mean) and m.name == "iou"
    m.update(torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 0, 0]), 4)  # 0.5 for 4 samples
    m.update(torch.tensor([5, 6]), torch.tensor([5, 6]), 2)  # 1.0 for 2 samples
    m.add_value(0.0, 2)  # a plain number, e.g. what a step returns
    assert m.compute() == pytest.approx((0.5 * 4 + 1.0 * 2 + 0.0 * 2) / 8)
    assert math.isnan(Mean("empty").compute())


def test_names_columns_and_the_defaults_of_each_task():
    assert column("accuracy") == "val_acc" and column("r2") == "val_r2"
    for kind, names in DEFAULT_METRICS.items():
        assert all(name in BUILTIN_METRICS for name in names), kind
    assert [build_metric(name).name for name in BUILTIN_METRICS] == list(BUILTIN_METRICS)
    with pytest.raises(ValueError, match=r"^unknown metric 'iou'; built-in: accuracy, top5, mae, rmse, r2, f1, map, "
                                         r"macro_f1, perplexity, multilabel_accuracy, multilabel_f1, "
                                         r"or give a spec \(file.py:my_metric\)$"):
        build_metric("iou")
