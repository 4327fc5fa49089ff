"""Building a run's task from ``[task]``: the kind settled from the data, the built-in task with its settings."""

from __future__ import annotations

import pytest
import torch

from workbench.core.train.config import TaskConfig, TrainConfig
from workbench.core.train.task.build import build_task, infer_kind, resolve_kind
from workbench.core.train.task.tasks import CausalLMTask, CriterionTask, StepTask


def test_kinds_are_inferred_from_a_batch():
    assert infer_kind((torch.randn(2, 3), torch.tensor([0, 1]))) == "classification"
    assert infer_kind((torch.randn(2, 3), torch.randn(2))) == "regression"
    assert infer_kind((torch.randn(2, 3), torch.tensor([[0, 1], [1, 1]]))) == "multilabel"
    assert infer_kind({"input_ids": torch.zeros(2, 4, dtype=torch.long), "attention_mask": torch.ones(2, 4)}) \
        == "model_loss"
    cfg = TrainConfig(task=TaskConfig(kind="auto"))
    assert resolve_kind(cfg, "regression") == "regression"  # the data's own task wins
    assert resolve_kind(cfg, "", None) == "classification"


def test_a_causal_lm_task_samples_as_task_says_and_a_step_spec_wins_over_the_kind(tmp_path):
    cfg = TrainConfig(task=TaskConfig(kind="causal_lm", prompts=["once"], max_new_tokens=7, do_sample=True,
                                      temperature=0.5, sample_seed=11))
    cfg.data.tokenizer = str(tmp_path)
    task = build_task(cfg, "causal_lm")
    assert isinstance(task, CausalLMTask)
    s = task.samples
    assert (s.prompts, s.max_new_tokens, s.do_sample, s.temperature, s.seed) == (["once"], 7, True, 0.5, 11)
    cfg.data.tokenizer = ""
    assert build_task(cfg, "causal_lm").samples is None  # no tokenizer: nothing to decode samples with
    assert isinstance(build_task(TrainConfig(task=TaskConfig(kind="regression")), "regression"), CriterionTask)
    step = TrainConfig(task=TaskConfig(kind="regression", step="workbench.core.train.task.tasks:Task"))
    assert isinstance(build_task(step, "regression"), StepTask)


def test_an_unknown_loss_name_is_refused():
    with pytest.raises(Exception, match="no_such_loss"):
        build_task(TrainConfig(task=TaskConfig(kind="regression", loss="no_such_loss")), "regression")
