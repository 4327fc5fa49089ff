"""Auto-detection: ranking architectures by a state_dict's keys and shapes."""

from __future__ import annotations

import pytest

from tests.core.model.checkpoint_files import make_model, save_lightning
from workbench.core.model.detection import detect_architecture
from workbench.core.model.loading import load_model
from workbench.core.model.meta_build import build_module
from workbench.core.model.spec import ArchSpec
from workbench.core.model.formats import read_checkpoint


def meta_state_dict(name: str, **kwargs) -> dict:
    """A state_dict with the right keys and shapes, no memory (big models cost nothing)."""
    return build_module(ArchSpec(name, kwargs), device="meta").state_dict()


def test_detect_resnet18_with_module_prefix_first():
    model = make_model("resnet18", num_classes=10)
    sd = {"module." + k: v for k, v in model.state_dict().items()}
    ranking = detect_architecture(sd)
    assert ranking[0].spec == ArchSpec("resnet18", {"num_classes": 10})
    assert ranking[0].score == 1.0
    assert all(0 <= c.score < 1 for c in ranking[1:])
    assert [c.score for c in ranking] == sorted((c.score for c in ranking), reverse=True)


def test_detect_default_resnet18_without_kwargs():
    sd = {"module." + k: v for k, v in meta_state_dict("resnet18").items()}
    best = detect_architecture(sd, top_k=1)
    assert len(best) == 1 and best[0].spec == ArchSpec("resnet18") and best[0].score == 1.0


def test_detect_lightning_wrapped_and_default_head(tmp_path):
    model = make_model("mobilenet_v3_small")
    ckpt = read_checkpoint(save_lightning(model, tmp_path / "m.ckpt"))
    best = detect_architecture(ckpt.state_dict, top_k=3)[0]
    assert best.spec == ArchSpec("mobilenet_v3_small") and best.score == 1.0
    loaded, report = load_model(ckpt, best.spec)
    assert report.stripped_prefixes == ["model."] and report.ok


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [("vit_b_16", {}), ("vit_b_32", {"num_classes": 5}), ("fcn_resnet50", {"num_classes": 5}),
     ("fasterrcnn_resnet50_fpn", {"num_classes": 11}), ("digits_cnn", {"num_classes": 3})],
)
def test_detect_infers_the_head(name, kwargs):
    ranking = detect_architecture(meta_state_dict(name, **kwargs), top_k=5)
    assert ranking[0].spec == ArchSpec(name, kwargs) and ranking[0].score == 1.0


def test_detect_custom_vit_config_is_not_claimed_as_a_perfect_match():
    ranking = detect_architecture(make_model("small_vit").state_dict())
    assert ranking and ranking[0].spec.name.startswith("vit_")  # the family is recognised
    assert all(c.score < 0.5 for c in ranking)  # but not as a fit


def test_a_timm_training_dict_opens_with_the_num_classes_of_its_head(tmp_path):
    """timm's train.py saves ``"arch": "efficientnet_lite0"`` and a 10-class head: the head gives num_classes."""
    import argparse

    import torch

    import timm  # noqa: E402 - in the test extra: fails if missing, never skips
    from timm.utils import CheckpointSaver

    from workbench.core.model.opening import open_model

    torch.manual_seed(0)
    model = timm.create_model("efficientnet_lite0", num_classes=10, pretrained=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    args = argparse.Namespace(model="efficientnet_lite0", num_classes=10, lr=0.1)  # as train.py passes its args
    saver = CheckpointSaver(model, opt, args=args, checkpoint_dir=str(tmp_path), recovery_dir=str(tmp_path))
    saver.save_checkpoint(epoch=0, metric=0.5)
    opened = open_model(tmp_path / "last.pth.tar", trust=True)  # its args are an argparse.Namespace
    assert opened.spec == ArchSpec("timm/efficientnet_lite0", {"num_classes": 10})
    assert opened.report.ok
    assert torch.equal(opened.model.classifier.weight, model.classifier.weight)
