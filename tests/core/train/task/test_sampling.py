"""Sampled completions (``[task] do_sample``): seeded, repeatable per prompt, and the run's random streams untouched."""

from __future__ import annotations

import pytest
import torch

from tests.core.train.text_models import tiny_llama_folder

import transformers  # noqa: E402,F401 - in the test extra: fails if missing, never skips

from workbench.core.train.config import TrainConfig  # noqa: E402
from workbench.core.train.task.samples import Samples  # noqa: E402

PROMPTS = ["the cat sees", "the dog"]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    folder = tiny_llama_folder(tmp_path_factory.mktemp("llama") / "model")
    return folder, AutoModelForCausalLM.from_pretrained(str(folder)).eval()


def _complete(folder, model, **kwargs) -> list[str]:
    samples = Samples(str(folder), PROMPTS, max_new_tokens=12, **kwargs)
    return [row["completion"] for row in samples.complete(model, torch.device("cpu"))]


def test_sampling_is_seeded_and_leaves_the_global_random_state_alone(llama):
    folder, model = llama
    torch.manual_seed(123)
    state = torch.get_rng_state()
    hot = dict(do_sample=True, temperature=5.0)  # a hot softmax over a random model: draws differ by seed
    first, again = _complete(folder, model, seed=1, **hot), _complete(folder, model, seed=1, **hot)
    assert torch.equal(torch.get_rng_state(), state)  # dropout, shuffling and replay draw as before
    assert first == again and all(first)
    others = [_complete(folder, model, seed=s, **hot) for s in (2, 3, 4)]
    assert any(o != first for o in others)
    greedy = _complete(folder, model)
    assert greedy == _complete(folder, model, seed=7)  # greedy ignores the seed


@pytest.mark.parametrize("value", [0, -1.0, "hot", True, float("inf")])
def test_a_temperature_that_is_not_a_positive_number_is_refused_naming_the_key(value):
    cfg = TrainConfig()
    cfg.task.temperature = value
    with pytest.raises(ValueError, match="task.temperature"):
        cfg.validate()
