"""Opening a file opens it at most twice (a sniff of its first bytes and one read), a question and its answer included.

Counted with ``sys.addaudithook`` on ``open`` events of the file's path
(:mod:`tests.core.model.open_counting`), through the core API: ``open_model``,
then the answer ``open_spec(err.checkpoint, ...)`` resumes from what was read.
(Before the formats package: 3 opens through the core, the question alone.)
"""

from __future__ import annotations

import pytest
import torch
import torchvision
from safetensors.torch import save_file

from tests.core.model.open_counting import count_opens
from workbench.core.model.demo import DigitsCNN
from workbench.core.model.open_policy import WEIGHTS_ONLY, OpenPolicy
from workbench.core.model.opening import NeedsArchitecture, PartialFit, open_model, open_spec
from workbench.core.model.spec import ArchSpec

MAX_OPENS = 2


def test_needs_architecture_then_open_spec_reads_the_file_once(tmp_path):
    path = tmp_path / "digits.pt"
    torch.save(DigitsCNN().state_dict(), path)
    with count_opens(path) as opened:
        with pytest.raises(NeedsArchitecture) as info:
            open_model(path)
        model = open_spec(info.value.checkpoint, ArchSpec("digits_cnn")).model
    assert type(model).__name__ == "DigitsCNN"
    assert opened.count <= MAX_OPENS, opened.count


def test_partial_fit_then_open_spec_partial_reads_the_file_once(tmp_path):
    path = tmp_path / "r18_10.pt"
    torch.save(torchvision.models.resnet18(num_classes=10).state_dict(), path)
    with count_opens(path) as opened:
        with pytest.raises(PartialFit) as info:
            open_model(path, "resnet18")
        err = info.value
        result = open_spec(err.checkpoint, err.spec, partial=True, edits=err.edits)
    assert result.model.fc.out_features == 1000 and result.notes
    assert opened.count <= MAX_OPENS, opened.count


def test_a_safetensors_file_is_opened_twice_at_most(tmp_path):
    path = tmp_path / "digits.safetensors"
    save_file(DigitsCNN().state_dict(), str(path))
    with count_opens(path) as opened:
        result = open_model(path, "digits_cnn")
    assert result.report.ok
    assert opened.count <= MAX_OPENS, opened.count


class _Answers:
    """An asker that answers every question at once and records them."""

    def __init__(self, arch=None, partial=True):
        self.arch, self.partial, self.asked = arch, partial, []

    def trust(self, err):
        self.asked.append("trust")
        return True

    def architecture(self, candidates, file_name):
        self.asked.append("architecture")
        return self.arch

    def partial_load(self, report, file_name, spec):
        self.asked.append("partial")
        return self.partial


def test_the_policy_answers_and_resumes_without_reading_again(tmp_path):
    path = tmp_path / "r18_10.pt"
    torch.save(torchvision.models.resnet18(num_classes=10).state_dict(), path)
    asker = _Answers(arch=ArchSpec("resnet18"))
    with count_opens(path) as opened:
        result = OpenPolicy(asker, take_unique_match=False).open(path)
    assert asker.asked == ["architecture", "partial"] and result.model.fc.out_features == 1000
    assert opened.count <= MAX_OPENS, opened.count


def test_the_policy_takes_a_unique_match_and_weights_only(tmp_path):
    path = tmp_path / "r18_7.pt"
    torch.save(torchvision.models.resnet18(num_classes=7).state_dict(), path)
    policy = OpenPolicy(_Answers())
    with count_opens(path) as opened:
        result = policy.open(path)
    assert policy.detected is not None and result.spec == ArchSpec("resnet18", {"num_classes": 7})
    assert result.input_shape == (1, 3, 224, 224)  # the example input comes with the model
    assert opened.count <= MAX_OPENS, opened.count
    asker = _Answers(arch=WEIGHTS_ONLY)
    assert OpenPolicy(asker, take_unique_match=False).open(path).weights_only


def test_the_policy_declines_and_keeps_the_question(tmp_path):
    path = tmp_path / "digits.pt"
    torch.save(DigitsCNN().state_dict(), path)
    policy = OpenPolicy(_Answers(arch=None), take_unique_match=False)
    assert policy.open(path) is None and isinstance(policy.declined, NeedsArchitecture)


def test_a_guess_that_does_not_fit_falls_back_to_the_weights(tmp_path):
    """The command line's rule: a detected architecture that does not load strictly shows the weights only."""
    path = tmp_path / "r18_10.pt"
    sd = torchvision.models.resnet18(num_classes=10).state_dict()
    sd["extra.weight"] = torch.zeros(3)  # a tensor no architecture takes: the best guess loads only partially
    torch.save(sd, path)

    class Guess(_Answers):
        def architecture(self, candidates, file_name):
            return candidates[0].spec

    policy = OpenPolicy(Guess(partial=False), take_unique_match=False, guess_fallback=True)
    result = policy.open(path)
    assert result.weights_only and policy.guess_failed is not None


def test_trust_reads_again_only_what_could_not_be_read(tmp_path):
    """A pickled module cannot be read without trust: after the yes it is read once more, without a new sniff.

    Counted: the sniff, the weights-only attempt, the scan of its globals (nothing unpickled), the trusted read.
    A file whose only code is its ``arch`` entry was read whole: trusting it reads nothing again.
    """
    path = tmp_path / "whole.pt"
    torch.save(DigitsCNN(), path)
    asker = _Answers()
    with count_opens(path) as opened:
        result = OpenPolicy(asker).open(path)
    assert asker.asked == ["trust"] and type(result.model).__name__ == "DigitsCNN"
    assert opened.count <= 4, opened.count
    coded = tmp_path / "coded.pt"
    torch.save({"model_state_dict": DigitsCNN().state_dict(),
                "arch": {"name": "workbench.core.model.demo:DigitsCNN", "kwargs": {}}}, coded)
    with count_opens(coded) as opened:
        result = OpenPolicy(_Answers()).open(coded)
    assert type(result.model).__name__ == "DigitsCNN" and opened.count <= MAX_OPENS, opened.count
