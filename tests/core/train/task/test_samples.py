"""A tiny causal LM folder fine-tuned on a text file: perplexity falls, samples at every evaluation, the
exported folder generates with transformers."""

from __future__ import annotations

import csv
import json
import os

import pytest
import torch

from tests.core.train.text_models import STORY, tiny_llama_folder

import transformers  # noqa: E402 - in the test extra: fails if missing, never skips

from workbench.core.train.task.sample_diff import compare_with_run, steps_of  # noqa: E402
from workbench.core.train.task.samples import SAMPLES_FILE, read_samples, runs_with_samples  # noqa: E402
from workbench.core.train.trainer.commands import SampleNow  # noqa: E402
from workbench.core.train.trainer.hooks import Callback  # noqa: E402


def test_read_samples_skips_lines_that_are_not_objects(tmp_path):
    (tmp_path / SAMPLES_FILE).write_text('{"step": 1, "prompt": "a", "completion": "b"}\nnot json\n[1]\n')
    assert read_samples(tmp_path) == [{"step": 1, "prompt": "a", "completion": "b"}]
    assert read_samples(tmp_path / "none") == []


def test_a_large_samples_file_is_read_from_its_end_and_a_fifo_not_at_all(tmp_path, monkeypatch):
    from workbench.core.train.task import samples as samples_module

    monkeypatch.setattr(samples_module, "MAX_SAMPLES_BYTES", 100)
    rows = [{"step": i, "prompt": "p", "completion": "x" * 20} for i in range(10)]
    (tmp_path / SAMPLES_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    tail = read_samples(tmp_path)
    assert tail and tail == rows[-len(tail):] and len(tail) < 10  # whole lines only, the newest
    fifo = tmp_path / "fifo-run"
    fifo.mkdir()
    os.mkfifo(fifo / SAMPLES_FILE)
    assert read_samples(fifo) == [] and runs_with_samples([tmp_path]) == []  # never opened


def test_sample_now_says_why_it_cannot_sample_and_leaves_the_run_alone(tmp_path):
    from workbench.core.train.task.samples import Samples, sample_now
    from workbench.core.train.task.tasks import CausalLMTask

    class Run:  # what sample_now reads of a Trainer
        def __init__(self, task):
            self.task, self.model, self.run_dir, self.step, self.epoch = task, torch.nn.Linear(2, 2), tmp_path, 3, 0

    for task, why in ((None, "completes no prompts"), (CausalLMTask(), "completes no prompts"),
                      (CausalLMTask(samples=Samples(str(tmp_path), [], 0)), "max new tokens is 0"),
                      (CausalLMTask(samples=Samples(str(tmp_path), [])), "no prompts yet")):
        cmd = SampleNow()
        sample_now(Run(task), cmd)
        assert why in cmd.error and cmd.rows == []
    assert not (tmp_path / SAMPLES_FILE).exists()


class SampleAt(Callback):
    """Presses "Sample now" once (queues a SampleNow) after step ``at``; keeps what was applied and whether the
    model trained again at the next step."""

    def __init__(self, at: int):
        self.at, self.applied, self.training_after = at, [], None

    def on_step_end(self, trainer, metrics):
        if trainer.step == self.at:
            trainer.queue(SampleNow())
        elif self.applied and self.training_after is None:
            self.training_after = trainer.model.training

    def on_command_applied(self, trainer, command):
        self.applied.append((trainer.step, command))


def _train(root, name: str, lr: float, epochs: int, prompts: list[str], callbacks=()) -> None:
    from workbench.core.train.launch.headless import train_from_toml

    (root / f"{name}.toml").write_text(f"""epochs = {epochs}
optimizer = "adamw"
lr = {lr}
tensorboard = false
run_dir = "{root / 'runs' / name}"
[model]
checkpoint = "model"
[task]
kind = "causal_lm"
prompts = {json.dumps(prompts)}
max_new_tokens = 6
[data]
dataset = "text"
root = "story.txt"
block_size = 16
batch_size = 8
""")
    lines: list[str] = []
    assert train_from_toml(root / f"{name}.toml", out=lines.append, callbacks=callbacks) == 0, lines


@pytest.fixture(scope="module")
def lm_runs(tmp_path_factory):
    """Two real runs of a tiny Llama: ``a`` learns (2 epochs, "Sample now" pressed after step 6), ``b`` barely
    moves (1 epoch at lr 1e-6, one prompt)."""
    root = tmp_path_factory.mktemp("lm")
    tiny_llama_folder(root / "model")
    (root / "story.txt").write_text(STORY)
    pressed = SampleAt(6)
    _train(root, "a", 0.01, 2, ["the cat sees", "the dog"], [pressed])
    _train(root, "b", 1e-6, 1, ["the cat sees"])
    return root, pressed


def test_causal_lm_learns_samples_and_exports(lm_runs):
    from workbench.cli import main

    root, pressed = lm_runs
    tmp_path, out_dir = root, root / "runs" / "a"
    rows = list(csv.DictReader(open(out_dir / "metrics.csv")))
    ppl = [float(r["val_perplexity"]) for r in rows]
    assert ppl[-1] < ppl[0] * 0.6, ppl  # measured 8.8 -> 4.0 over 2 epochs
    for r in rows:  # exp(mean validation loss)
        assert float(r["val_perplexity"]) == pytest.approx(torch.tensor(float(r["val_loss"])).exp().item(), rel=1e-5)
    samples = [json.loads(line) for line in (out_dir / SAMPLES_FILE).read_text().splitlines()]
    evaluated = [s for s in samples if not s.get("on_demand")]
    assert [(s["step"], s["epoch"], s["prompt"]) for s in evaluated] == \
        [(step, epoch, p) for epoch, step in enumerate((4, 8)) for p in ("the cat sees", "the dog")]
    assert all(isinstance(s["completion"], str) for s in samples) and samples[-2]["completion"]
    # "Sample now" between the evaluations: each prompt at the step it was applied, marked, in file order
    (step, command), = pressed.applied
    assert 4 < step < 8 and command.error is None
    on_demand = [s for s in samples if s.get("on_demand")]
    assert [(s["step"], s["epoch"], s["prompt"]) for s in on_demand] == \
        [(step, 1, "the cat sees"), (step, 1, "the dog")]
    assert samples[2:4] == on_demand and command.rows == on_demand
    assert pressed.training_after is True  # back in train mode for the next step

    out = tmp_path / "exported"
    assert main(["export", str(out_dir / "best.pt"), "--format", "hf", "--out", str(out)]) == 0
    model = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(out))
    ids = tok("the cat sees", return_tensors="pt", add_special_tokens=False)["input_ids"]
    generated = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=6,
                               do_sample=False, pad_token_id=tok.pad_token_id)
    assert tok.decode(generated[0, ids.shape[1]:], skip_special_tokens=True) == samples[-2]["completion"]


def test_two_runs_samples_compare_at_the_nearest_step(lm_runs):
    """Run a's completions against run b's (both real samples.jsonl): b's text at its nearest step, word by word."""
    root, _ = lm_runs
    a_dir, b_dir = root / "runs" / "a", root / "runs" / "b"
    (root / "runs" / "empty").mkdir()  # a run folder without samples is not offered
    assert runs_with_samples([root / "runs", root / "missing"]) == [a_dir, b_dir]
    assert runs_with_samples([root / "runs", a_dir.parent], exclude=a_dir) == [b_dir]
    a, b = steps_of(read_samples(a_dir)), steps_of(read_samples(b_dir))
    assert [(s.step, s.on_demand) for s in a] == [(4, False), (a[1].step, True), (8, False)]
    assert [s.step for s in b] == [4] and set(b[0].completions) == {"the cat sees"}
    b_text = b[0].completions["the cat sees"]
    for shown in a:
        cat, dog = compare_with_run(shown, b)
        assert (cat.prompt, cat.against_step, dog.prompt, dog.against_step) == ("the cat sees", 4, "the dog", None)
        assert "".join(t for op, t in cat.pieces if op != "removed") == shown.completions["the cat sees"]
        assert "".join(t for op, t in cat.pieces if op != "added") == b_text  # b's words struck, a's added
        assert dog.pieces == [("same", shown.completions["the dog"])]  # b never completed it: nothing to diff
    # the trained run says something else than the one that barely moved
    assert any(op != "same" for op, _ in compare_with_run(a[-1], b)[0].pieces), (a[-1].completions, b_text)
