"""What a causal language model says while it learns: prompts completed at every evaluation, in ``samples.jsonl``.

At the end of each validation (:meth:`CausalLMTask.after_validation
<workbench.core.train.task.tasks.CausalLMTask.after_validation>`) the model
completes each prompt greedily (``model.generate(do_sample=False)``: the same
text for the same weights), or with ``[task] do_sample = true`` by sampling at
``[task] temperature`` from ``[task] sample_seed`` (the same noise at every evaluation,
drawn in a forked random state so training's own streams are not advanced),
with at most ``[task] max_new_tokens`` new tokens,
and one JSON object a line is appended to the run folder's ``samples.jsonl``::

    {"step": 120, "epoch": 0, "prompt": "Once upon", "completion": " a time ..."}

``epoch`` is 0-based, as ``metrics.csv``'s. The prompts are ``[task] prompts``,
else the first :data:`PROMPT_TOKENS` tokens of the first :data:`DEFAULT_PROMPTS`
validation rows (instruction / chat rows: each row's prompt, up to its answer). Generating stops for the evaluation once it has taken
:data:`TIME_BUDGET_S` (the remaining prompts wait for the next one), so that
sampling never dominates a run. Only the main process of a data-parallel run writes.

"Sample now" (the command :class:`~workbench.core.train.trainer.commands.SampleNow`, applied
between two steps by :func:`sample_now`) completes the same prompts the same way at the current
step and marks its rows ``"on_demand": true``. :func:`runs_with_samples` lists the run folders
another run's samples can be compared with (:func:`~workbench.core.train.task.sample_diff.compare_with_run`).
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import torch

from workbench.core.files import append_jsonl, read_jsonl

__all__ = ["SAMPLES_FILE", "PROMPT_TOKENS", "DEFAULT_PROMPTS", "TIME_BUDGET_S", "MAX_SAMPLES_BYTES", "MAX_RUNS_LISTED",
           "Samples", "read_samples", "sample_now", "runs_with_samples"]

SAMPLES_FILE = "samples.jsonl"
#: Tokens of a validation row used as a default prompt.
PROMPT_TOKENS = 8
#: Validation rows that give the default prompts.
DEFAULT_PROMPTS = 2
#: Wall-clock seconds of generation per evaluation at most (the probe budget's order): past it, the
#: remaining prompts are skipped for this evaluation.
TIME_BUDGET_S = 10.0
#: Bytes of a ``samples.jsonl`` read at most (the newest lines): a run writes ~200 bytes per prompt and
#: evaluation, so 8 MiB hold ~40,000 completions; a larger file (not one a run writes) is read from its end.
MAX_SAMPLES_BYTES = 8 * 1024 * 1024
#: Run folders :func:`runs_with_samples` lists at most (the first by name): a menu longer than this is not read.
MAX_RUNS_LISTED = 200


class Samples:
    """Completes prompts and appends them to ``run_dir/samples.jsonl``.

    Parameters
    ----------
    tokenizer_path : str
        The folder of the tokenizer (loaded on first use).
    prompts : list of str
        Empty: the first tokens of the first validation rows (:meth:`see_batch`).
    max_new_tokens : int
        New tokens per completion (0: no samples).
    do_sample : bool
        Sample (``generate(do_sample=True, temperature=...)``) instead of greedy decoding.
    temperature : float
        The sampling temperature (with ``do_sample``).
    seed : int
        Each prompt's sampling starts from ``seed`` in a forked random state
        (:func:`torch.random.fork_rng`): the same prompt draws the same noise at every
        evaluation, so what changes between steps is the model, and the training's own
        random streams (dropout, shuffling, replay) are not advanced.
    """

    def __init__(self, tokenizer_path: str, prompts: list[str] = (), max_new_tokens: int = 20, *,
                 do_sample: bool = False, temperature: float = 1.0, seed: int = 0):
        self.tokenizer_path = tokenizer_path
        self.prompts = [str(p) for p in prompts]
        self.max_new_tokens = int(max_new_tokens)
        self.do_sample = bool(do_sample)
        self.temperature = float(temperature)
        self.seed = int(seed)
        self._tokenizer = None
        self._default_ids: list[list[int]] = []

    def tokenizer(self):
        """The tokenizer of :attr:`tokenizer_path` (:func:`~workbench.core.train.data.text_files.load_tokenizer`)."""
        if self._tokenizer is None:
            from workbench.core.train.data.text_files import load_tokenizer

            self._tokenizer = load_tokenizer(self.tokenizer_path)
        return self._tokenizer

    def see_batch(self, batch: dict) -> None:
        """Keep the first rows of the first validation batch as the default prompts (no prompts given)."""
        if self.prompts or self._default_ids or not isinstance(batch.get("input_ids"), torch.Tensor):
            return
        ids, labels = batch["input_ids"][:DEFAULT_PROMPTS].cpu(), batch.get("labels")
        if isinstance(labels, torch.Tensor) and bool((labels[:DEFAULT_PROMPTS] == -100).any()):
            # instruction / chat rows (data.lm_chat): each row's prompt, up to its answer's first token
            answer = (labels[:DEFAULT_PROMPTS] != -100).cpu()
            self._default_ids = [row[:int(a.nonzero()[0])].tolist() if a.any() else row[:PROMPT_TOKENS].tolist()
                                 for row, a in zip(ids, answer)]
            return
        self._default_ids = [row.tolist() for row in ids[:, :PROMPT_TOKENS]]

    def has_prompts(self) -> bool:
        """Whether there is something to complete: prompts given, or the default ones taken from validation."""
        return bool(self.prompts or self._default_ids)

    def _prompt_ids(self) -> list[tuple[str, list[int]]]:
        tok = self.tokenizer()
        if self.prompts:
            return [(p, tok(p, add_special_tokens=False)["input_ids"]) for p in self.prompts]
        return [(tok.decode(ids), ids) for ids in self._default_ids]

    def complete(self, model: Any, device: torch.device, budget_s: float = TIME_BUDGET_S) -> list[dict]:
        """``[{"prompt", "completion"}]`` by ``model.generate``, greedy or seeded sampling (skipped past ``budget_s`` s)."""
        tok = self.tokenizer()
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        sampling = {"do_sample": True, "temperature": self.temperature} if self.do_sample else {"do_sample": False}
        cuda = [device] if torch.device(device).type == "cuda" else []
        out, t0 = [], time.perf_counter()
        for text, ids in self._prompt_ids():
            if not ids or time.perf_counter() - t0 > budget_s:
                continue
            x = torch.tensor([ids], dtype=torch.long, device=device)
            with torch.random.fork_rng(devices=cuda):  # the run's random streams stay where they were
                torch.manual_seed(self.seed)
                generated = model.generate(input_ids=x, attention_mask=torch.ones_like(x), **sampling,
                                           max_new_tokens=self.max_new_tokens, pad_token_id=pad)
            out.append({"prompt": text, "completion": tok.decode(generated[0, len(ids):].tolist(),
                                                                 skip_special_tokens=True)})
        return out

    def write(self, trainer: Any, on_demand: bool = False) -> list[dict]:
        """Complete the prompts with ``trainer.model`` and append them to ``trainer.run_dir/samples.jsonl``.

        Nothing when this is not the main process, the run has no folder yet, or
        ``max_new_tokens`` is 0. Returns the rows written (``"on_demand": true`` in
        each with ``on_demand``: :func:`sample_now`).

        Raises
        ------
        OSError
            The lines could not be appended (none of them is then).
        """
        if self.max_new_tokens <= 0 or not getattr(trainer, "is_main", True) or trainer.run_dir is None:
            return []
        model = trainer.model
        model = getattr(model, "module", model)  # DistributedDataParallel's wrapped model
        if not hasattr(model, "generate"):
            return []
        mark = {"on_demand": True} if on_demand else {}
        rows = [{"step": int(trainer.step), "epoch": int(trainer.epoch), **r, **mark}
                for r in self.complete(model, trainer.device)]
        if rows:
            append_jsonl(Path(trainer.run_dir) / SAMPLES_FILE, rows)  # whole lines or none
        return rows


def sample_now(trainer: Any, cmd: Any) -> None:
    """Apply a :class:`~workbench.core.train.trainer.commands.SampleNow` between two steps (training thread).

    The prompts are completed as at an evaluation (:meth:`Samples.write`, within
    :data:`TIME_BUDGET_S`), with the model in eval mode and no gradients; it goes back
    to train mode after (with the run's BatchNorm policy). Fills in ``cmd.rows``, or
    ``cmd.error`` (one line) when nothing can be written; never raises, so a press
    never ends the run.

    Parameters
    ----------
    trainer : Trainer
        Its ``task.samples`` (a causal LM's :class:`Samples`), ``model``, ``run_dir``, ``step``, ``epoch``.
    cmd : SampleNow
    """
    samples = getattr(getattr(trainer, "task", None), "samples", None)
    if not isinstance(samples, Samples):
        cmd.error = "this run completes no prompts: Sample now is for a causal language model with its tokenizer"
        return
    if samples.max_new_tokens <= 0:
        cmd.error = "Task › max new tokens is 0: there is nothing to generate"
        return
    if not samples.has_prompts():
        cmd.error = ("no prompts yet: type some in Task › Prompts, or sample after the first evaluation "
                     "(its first validation rows are the prompts)")
        return
    model = trainer.model
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            cmd.rows = samples.write(trainer, on_demand=True)
    except OSError as exc:
        cmd.error = f"{SAMPLES_FILE}: could not be written ({exc.strerror or exc}); the run goes on"
    except Exception as exc:  # noqa: BLE001 - a model whose generate fails: said, the run goes on
        cmd.error = f"generating failed: {type(exc).__name__}: {exc}"
    finally:
        if was_training:
            model.train()
            trainer.apply_bn_policy()


def read_samples(run_dir: str | Path) -> list[dict]:
    """The rows of ``run_dir/samples.jsonl`` (a line that is not a JSON object is left out); [] when none.

    At most the last :data:`MAX_SAMPLES_BYTES` of the file are read (its first, partial line then left out);
    a file that is not a regular file (a FIFO, a device) or cannot be read gives [].
    """
    return read_jsonl(Path(run_dir) / SAMPLES_FILE, max_bytes=MAX_SAMPLES_BYTES)


def runs_with_samples(roots: list[str | Path], exclude: str | Path | None = None) -> list[Path]:
    """The run folders directly under each of ``roots`` that hold a ``samples.jsonl``, by name (each once).

    Parameters
    ----------
    roots : list of str or Path
        Folders of run folders (the Runs dock's root, the shown run's parent); one that is missing or cannot
        be listed is passed over.
    exclude : str or Path, optional
        A run folder left out (the one shown).

    Returns
    -------
    list of Path
        At most :data:`MAX_RUNS_LISTED`; a ``samples.jsonl`` that is not a regular file does not count.
    """
    skip = {os.path.realpath(exclude)} if exclude else set()
    found: dict[str, Path] = {}
    for root in roots:
        try:
            with os.scandir(root) as it:
                entries = sorted((e for e in it if e.is_dir()), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            real = os.path.realpath(entry.path)
            if real in skip or real in found:
                continue
            try:
                if stat.S_ISREG(os.stat(Path(entry.path) / SAMPLES_FILE).st_mode):
                    found[real] = Path(entry.path)
            except OSError:
                continue
    return sorted(found.values(), key=lambda p: (p.name, str(p)))[:MAX_RUNS_LISTED]
