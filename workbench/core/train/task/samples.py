"""What a causal language model says while it learns: prompts completed at every evaluation, in ``samples.jsonl``.

At the end of each validation (:meth:`CausalLMTask.after_validation
<workbench.core.train.task.tasks.CausalLMTask.after_validation>`) the model
completes each prompt greedily (``model.generate(do_sample=False)``: the same
text for the same weights) with at most ``[task] max_new_tokens`` new tokens,
and one JSON object a line is appended to the run folder's ``samples.jsonl``::

    {"step": 120, "epoch": 0, "prompt": "Once upon", "completion": " a time ..."}

``epoch`` is 0-based, as ``metrics.csv``'s. The prompts are ``[task] prompts``,
else the first :data:`PROMPT_TOKENS` tokens of the first :data:`DEFAULT_PROMPTS`
validation rows (instruction / chat rows: each row's prompt, up to its answer). Generating stops for the evaluation once it has taken
:data:`TIME_BUDGET_S` (the remaining prompts wait for the next one), so that
sampling never dominates a run. Only the main process of a data-parallel run writes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from workbench.core.files import append_jsonl, read_jsonl

__all__ = ["SAMPLES_FILE", "PROMPT_TOKENS", "DEFAULT_PROMPTS", "TIME_BUDGET_S", "Samples", "read_samples"]

SAMPLES_FILE = "samples.jsonl"
#: Tokens of a validation row used as a default prompt.
PROMPT_TOKENS = 8
#: Validation rows that give the default prompts.
DEFAULT_PROMPTS = 2
#: Wall-clock seconds of generation per evaluation at most (the probe budget's order): past it, the
#: remaining prompts are skipped for this evaluation.
TIME_BUDGET_S = 10.0


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
    """

    def __init__(self, tokenizer_path: str, prompts: list[str] = (), max_new_tokens: int = 20):
        self.tokenizer_path = tokenizer_path
        self.prompts = [str(p) for p in prompts]
        self.max_new_tokens = int(max_new_tokens)
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

    def _prompt_ids(self) -> list[tuple[str, list[int]]]:
        tok = self.tokenizer()
        if self.prompts:
            return [(p, tok(p, add_special_tokens=False)["input_ids"]) for p in self.prompts]
        return [(tok.decode(ids), ids) for ids in self._default_ids]

    def complete(self, model: Any, device: torch.device, budget_s: float = TIME_BUDGET_S) -> list[dict]:
        """``[{"prompt", "completion"}]`` by greedy ``model.generate`` (skipped past ``budget_s`` seconds)."""
        tok = self.tokenizer()
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        out, t0 = [], time.perf_counter()
        for text, ids in self._prompt_ids():
            if not ids or time.perf_counter() - t0 > budget_s:
                continue
            x = torch.tensor([ids], dtype=torch.long, device=device)
            generated = model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                                       max_new_tokens=self.max_new_tokens, pad_token_id=pad)
            out.append({"prompt": text, "completion": tok.decode(generated[0, len(ids):].tolist(),
                                                                 skip_special_tokens=True)})
        return out

    def write(self, trainer: Any) -> list[dict]:
        """Complete the prompts with ``trainer.model`` and append them to ``trainer.run_dir/samples.jsonl``.

        Nothing when this is not the main process, the run has no folder yet, or
        ``max_new_tokens`` is 0. Returns the rows written.
        """
        if self.max_new_tokens <= 0 or not getattr(trainer, "is_main", True) or trainer.run_dir is None:
            return []
        model = trainer.model
        model = getattr(model, "module", model)  # DistributedDataParallel's wrapped model
        if not hasattr(model, "generate"):
            return []
        rows = [{"step": int(trainer.step), "epoch": int(trainer.epoch), **r}
                for r in self.complete(model, trainer.device)]
        if rows:
            append_jsonl(Path(trainer.run_dir) / SAMPLES_FILE, rows)  # whole lines or none
        return rows


def read_samples(run_dir: str | Path) -> list[dict]:
    """The rows of ``run_dir/samples.jsonl`` (a line that is not a JSON object is left out); [] when none."""
    return read_jsonl(Path(run_dir) / SAMPLES_FILE)
