"""Export a model to ONNX, ``.pt2``, safetensors or a Hugging Face folder, and prove the artifact on a real batch.

:func:`export` is ``workbench.export.export``, ``workbench export`` and (on a
worker thread) the window's File > Export…. It

1. opens the model when given a path (:func:`~workbench.core.model.opening.open_model`),
   merges LoRA adapters into their base weights and casts to the dtype asked,
   on a copy (the caller's model keeps its adapters, dtype and train / eval modes);
2. writes the artifact into a temporary folder beside the target;
3. unless ``check=False``, runs the artifact (onnxruntime on the CPU, the loaded
   ``.pt2``, the weights reloaded into the architecture) on the example batch and,
   with a dynamic batch, on a batch of another size, beside the PyTorch model in
   eval mode (:func:`check_artifact`); when an output differs beyond the dtype's
   tolerance (:data:`~workbench.core.export.compare.TOLERANCES`), names the first
   module whose output differs (:mod:`~workbench.core.export.divergence`);
4. moves the artifact into place (``os.replace``) and writes ``export_report.json``
   beside it. An export that fails leaves nothing at the target.

Qt-free; onnx and onnxruntime are imported only by an ONNX export.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from workbench.core.errors import WorkbenchError
from workbench.core.export.compare import OutputCheck, compare_output, flatten_outputs, tolerance
from workbench.core.export.divergence import first_difference, record_module_outputs
from workbench.core.export.inputs import DTYPES, as_example, batch_size, cast_example, with_batch
from workbench.core.export.quiet import first_line
from workbench.core.export.report import REPORT_NAME, ExportError, ExportReport
from workbench.core.model.example_input import ExampleInput, example_input

__all__ = ["FORMATS", "export", "check_artifact", "target_path", "format_for_path", "batch_from_run"]

#: Formats, by name: the file suffix written (None: a folder) and what it is for.
FORMATS: dict[str, tuple[str | None, str]] = {
    "onnx": (".onnx", "ONNX graph for onnxruntime, TensorRT, OpenVINO, browsers"),
    "pt2": (".pt2", "torch.export program: torch.export.load, AOTInductor, ExecuTorch"),
    "safetensors": (".safetensors", "the weights alone with the architecture in its metadata"),
    "hf": (None, "a save_pretrained folder transformers' from_pretrained loads"),
}
#: A dynamic batch is traced with at least this many rows: torch.export specializes a dimension of size 1.
_TRACE_BATCH = 2
#: The name of the check row of an artifact that could not be run.
_NOT_RUN = "all outputs"
#: Samples taken from a run's validation data for the check.
_RUN_BATCH = 4
#: The second batch of a dynamic-batch check has this many rows more than the example.
_EXTRA_ROWS = 2


def target_path(fmt: str, out: str | Path) -> Path:
    """The file (or folder, for ``hf``) an export to ``out`` writes.

    ``out`` with the format's suffix is the file; an existing folder or a name
    without a suffix is a folder, holding ``model.<suffix>``.

    Raises
    ------
    ExportError
        An unknown format, another suffix, or a file where ``hf`` needs a folder.
    """
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}: choose one of {', '.join(FORMATS)}")
    out = Path(out)
    suffix = FORMATS[fmt][0]
    if suffix is None:
        if out.is_file():
            raise ExportError(f"{out}: is a file; the hf format writes a folder: name a folder")
        return out
    if out.suffix.lower() == suffix:
        return out
    if out.is_dir() or not out.suffix:
        return out / f"model{suffix}"
    raise ExportError(f"{out}: a {fmt} export is a {suffix} file: name it {out.stem}{suffix} (or a folder)")


def format_for_path(path: str | Path) -> str:
    """The file format an export to ``path`` writes, by its suffix (``.onnx``, ``.pt2``, ``.safetensors``).

    The window's File > Export model… and the Runs dock's Export… pick the format so.

    Raises
    ------
    ExportError
        Another suffix (``hf`` writes a folder, which a suffix cannot name).
    """
    suffix = Path(path).suffix.lower()
    files = {suf: fmt for fmt, (suf, _) in FORMATS.items() if suf is not None}
    if suffix in files:
        return files[suffix]
    *first, last = files
    raise ExportError(f"{Path(path).name}: choose a {', '.join(first)} or {last} file")


@contextlib.contextmanager
def _staging(target: Path) -> Iterator[Path]:
    """A temporary folder beside ``target``, removed at the end whatever happens."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".export", dir=target.parent))
    except OSError as exc:
        raise ExportError(f"{target}: cannot be written ({exc.strerror or exc}); choose a writable folder") from exc
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _publish(staged: Path, target: Path) -> list[Path]:
    """Move what was staged into place with ``os.replace``: the file(s) beside ``target``, or the folder's files."""
    written = []
    try:
        if staged.is_dir():  # a folder export: its files replace those of the same names
            target.mkdir(parents=True, exist_ok=True)
            for entry in sorted(staged.iterdir()):
                dest = target / entry.name
                if dest.is_dir() and not dest.is_symlink():
                    shutil.rmtree(dest)
                os.replace(entry, dest)
                written.append(dest)
        else:
            for entry in sorted(staged.parent.iterdir()):  # the file and its external data, if any
                dest = target.parent / entry.name
                os.replace(entry, dest)
                written.append(dest)
    except OSError as exc:
        raise ExportError(f"{target}: cannot be written ({exc.strerror or exc}); choose a writable folder") from exc
    return written


def batch_from_run(run_toml: str | Path, model: nn.Module, *, n: int = 2, trust: bool = False) -> ExampleInput:
    """The first ``n`` validation samples of a run file's data, as the model's input.

    Raises
    ------
    ExportError
        The run file cannot be read, or names a dataset factory without ``trust``.
    DataError
        The dataset cannot be built.
    """
    from workbench.core.model.example_input import from_batch
    from workbench.core.train.config import DATASETS, TrainConfig
    from workbench.core.train.data.example_batch import example_batch, model_input

    try:
        cfg = TrainConfig.from_toml(run_toml)
    except (OSError, ValueError, TypeError) as exc:
        raise ExportError(f"{run_toml}: cannot be read as a run file ({exc})") from exc
    if cfg.data.dataset not in DATASETS and not trust:
        raise ExportError(f"{run_toml}: its dataset {cfg.data.dataset!r} is code the file names; "
                          "run it only if you trust the file (--trust)")
    return from_batch(model_input(example_batch(cfg, n), cfg.task.kind), model)


def _run_file(source: str) -> Path | None:
    """The ``run.toml`` beside a checkpoint (a run's ``best.pt``), or None."""
    if not source or Path(source).is_dir():
        return None
    run_toml = Path(source).with_name("run.toml")
    return run_toml if run_toml.is_file() else None


def _open(path: Path, trust: bool) -> tuple[nn.Module, Any, list[dict], ExampleInput | None]:
    """``(model, spec, edits, example)`` of a checkpoint or model folder, by the open policy."""
    from workbench.core.model.opening import open_model

    opened = open_model(path, trust=trust)
    if opened.weights_only:
        raise ExportError(f"{path}: opens as weights only (no architecture), so it cannot be run or exported")
    example = opened.example
    if example is None and opened.input_shape is not None:
        example = example_input(opened.model, opened.input_shape, fill="randn")
    return opened.model, opened.spec, list(opened.checkpoint.metadata.edits or []), example


def _default_example(model: nn.Module, input_shape: Any) -> ExampleInput:
    try:
        return example_input(model, input_shape, fill="randn")
    except ValueError as exc:
        raise ExportError(f"{exc} (--input-shape, or example= in Python)") from exc


def _prepared(model: nn.Module, dtype: str, notes: list[str], fmt: str = "onnx", merge: bool = True) -> nn.Module:
    """The model to export: a copy when LoRA adapters are merged, the key/value cache is turned off (a graph
    export) or the dtype / device changes, in eval mode."""
    from workbench.core.model.lora import lora_paths, merged_copy

    work = model
    if merge and lora_paths(model):
        work = merged_copy(model)
        notes.append("LoRA adapters merged into their base weights (W + alpha/r B A) for the export")
    if fmt in ("onnx", "pt2") and getattr(getattr(work, "config", None), "use_cache", False):
        # transformers' KV cache (DynamicCache) is a runtime object neither ONNX exporter returns: the graph
        # computes what a forward without a cache does (the logits); a hf folder keeps its config as it is
        work = copy.deepcopy(work) if work is model else work
        work.config.use_cache = False
        notes.append("use_cache turned off for the export: the graph returns the logits, not the key/value cache")
    target = DTYPES[dtype]
    tensors = list(work.parameters()) + list(work.buffers())
    if any((t.is_floating_point() and t.dtype != target) or t.device.type != "cpu" for t in tensors):
        work = copy.deepcopy(work) if work is model else work
        work.to("cpu").to(target)
    return work


@contextlib.contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, training in modes:
            m.train(training)


def _resolve_example(fmt: str, model: nn.Module, work: nn.Module, example: Any, default: ExampleInput | None,
                     input_shape: Any, source: str, batch_from: Any, check: bool, trust: bool,
                     notes: list[str]) -> tuple[ExampleInput, str, bool]:
    """``(example, where it came from, check)`` by :func:`export`'s rule; ``check`` turns False (with a note)
    for a weights-only format when no example can be made."""
    origin = ""
    run_file = Path(batch_from) if batch_from else None
    if run_file is None and example is None and input_shape is None:
        run_file = _run_file(source)
    if example is None and run_file is not None and check:
        try:
            example = batch_from_run(run_file, model, n=_RUN_BATCH, trust=trust)
            origin = f" (validation data of {run_file})"
        except WorkbenchError as exc:
            if batch_from:
                raise
            notes.append(f"the run's data gave no batch ({str(exc).splitlines()[0]}); checked on the example input")
    if example is not None:
        return as_example(example), origin, check
    if default is not None and input_shape is None:
        return default, origin, check
    try:
        return _default_example(work, input_shape), origin, check
    except ExportError as exc:
        if fmt in ("onnx", "pt2"):
            raise
        notes.append(f"not checked: {exc}")
        return ExampleInput((torch.zeros(1),)), origin, False  # the weights need no input; only the check does


def export(model_or_path: nn.Module | str | Path, fmt: str, out: str | Path, *, example: Any = None,
           input_shape: Sequence[int] | str | None = None, dynamic_batch: bool = True, check: bool = True,
           opset: int | None = None, dtype: str = "fp32", trust: bool = False, arch: Any = None,
           tokenizer: str | Path | None = None, batch_from: str | Path | None = None,
           adapters: str = "merged") -> ExportReport:
    """Export a model and prove the artifact answers as the model does on a real batch.

    Parameters
    ----------
    model_or_path : nn.Module, str or Path
        A model (left as it is: the export works on a copy where it changes
        anything, and restores its train / eval modes), or a checkpoint file or
        model folder (a run's ``best.pt``) opened by Workbench's open policy.
    fmt : {"onnx", "pt2", "safetensors", "hf"}
        See :data:`FORMATS`.
    out : str or Path
        The file (``model.onnx``) or a folder (``model.<suffix>`` is written
        into it; the ``hf`` folder itself); see :func:`target_path`.
    example : Tensor, tuple, dict or ExampleInput, optional
        What to call the model with: a real batch. Default: the validation data
        of ``batch_from`` (or of the run a checkpoint path belongs to: ``run.toml``
        beside it), else the file's own example, else one of ``input_shape``
        (standard normal values, seed 0), else token ids for an embedding model.
    input_shape : sequence of int or str, optional
        ``(N, C, H, W)`` of the default example.
    dynamic_batch : bool
        Make dimension 0 dynamic (onnx, pt2) and check a batch of another size too.
    check : bool
        Run and compare the artifact (default True).
    opset : int, optional
        ONNX opset (default: the exporter's).
    dtype : {"fp32", "fp16", "bf16"}
        The dtype of the exported weights and float inputs; picks the tolerance.
    trust : bool
        Run code a file names when opening it (as ``open_model``); also a run file's dataset factory.
    arch : ArchSpec, str or dict, optional
        The architecture of a model given as an object, stored in the safetensors
        metadata so Workbench reopens it as itself (a path's own is used otherwise).
    tokenizer : str or Path, optional
        ``hf``: the tokenizer folder to copy (default: the one the run beside the checkpoint names).
    batch_from : str or Path, optional
        A run file whose first validation samples are the example (:func:`batch_from_run`).
    adapters : {"merged", "separate"}
        LoRA adapters merged into their base weights (``W + alpha/r B A``, every
        format), or, for ``hf`` only, saved apart in peft's format (``adapter_config.json``
        + ``adapter_model.safetensors``, the trained head as ``modules_to_save``) beside the
        tokenizer; the check then loads the base model folder with
        ``peft.PeftModel.from_pretrained`` and compares it with the adapted model.

    Returns
    -------
    ExportReport
        ``report.passed`` False when an output differs beyond the tolerance (the
        artifact and its report are written all the same).

    Raises
    ------
    ExportError
        The exporter refused the model (one line: the model, the reason), the
        extra is missing, the target cannot be written, or no example can be made;
        ``adapters="separate"`` with another format than ``hf`` or a model without
        adapters; nothing is written at ``out``.
    WorkbenchError
        The file cannot be opened (as ``open_model``).
    """
    from workbench.core.fake_tensors import FAKE_TENSOR_LOCK
    from workbench.core.model.opening import as_spec

    start = time.perf_counter()
    tolerance(dtype)
    apart = _adapters_apart(adapters, fmt)
    target = target_path(fmt, out)
    notes: list[str] = []
    source, spec, edits, default = "", as_spec(arch), [], None
    if isinstance(model_or_path, nn.Module):
        model = model_or_path
    else:
        source = str(model_or_path)
        model, file_spec, edits, default = _open(Path(model_or_path), trust)
        spec = spec if spec is not None else file_spec
    base = adapter_base(model, source) if apart else ""
    if apart and not Path(base).is_dir():
        notes.append(f"not checked: the base model {base!r} is not a folder here (the adapters load onto it)")
        check = False
    work = _prepared(model, dtype, notes, fmt, merge=not apart)
    ex, origin, check = _resolve_example(fmt, model, work, example, default, input_shape, source, batch_from,
                                         check, trust, notes)
    ex = cast_example(ex.to("cpu"), DTYPES[dtype])
    with FAKE_TENSOR_LOCK, _eval_mode(work), _staging(target) as tmp:
        staged = tmp / target.name
        exporter, reason = _write(fmt, work, ex, staged, dynamic_batch=dynamic_batch, opset=opset, spec=spec,
                                  edits=edits, source=source, tokenizer=tokenizer, base=base)
        if check:
            report = check_artifact(work, fmt, staged, ex, dtype=dtype, dynamic_batch=dynamic_batch and
                                    fmt in ("onnx", "pt2"), spec=spec)
        else:
            report = ExportReport(fmt, str(staged), dtype)
        _publish(staged, target)
    report.path, report.source, report.exporter, report.fallback_reason = str(target), source, exporter, reason
    report.dynamic_batch = dynamic_batch and fmt in ("onnx", "pt2")
    report.example += origin
    report.notes = notes + report.notes
    report.seconds = round(time.perf_counter() - start, 3)
    _write_report(report, target, fmt)
    return report


def _write(fmt: str, model: nn.Module, ex: ExampleInput, staged: Path, *, dynamic_batch: bool, opset: int | None,
           spec: Any, edits: list[dict], source: str, tokenizer: Any, base: str = "") -> tuple[str, str]:
    traced = with_batch(ex, _TRACE_BATCH) if dynamic_batch and batch_size(ex) < _TRACE_BATCH else ex
    if fmt == "onnx":
        from workbench.core.export.onnx_format import export_onnx

        return export_onnx(model, traced, staged, dynamic_batch=dynamic_batch, opset=opset)
    if fmt == "pt2":
        from workbench.core.export.pt2_format import export_pt2

        export_pt2(model, traced, staged, dynamic_batch=dynamic_batch)
        return "torch.export", ""
    if fmt == "safetensors":
        from workbench.core.export.weights import save_weights

        save_weights(model, staged, spec=spec, edits=edits, source=source)
        return "safetensors", ""
    if base:
        from workbench.core.export.weights import save_adapter_folder

        save_adapter_folder(model, staged, base=base, source=source, tokenizer=tokenizer)
        return "peft save_pretrained (adapters apart)", ""
    from workbench.core.export.weights import save_folder

    save_folder(model, staged, source=source, tokenizer=tokenizer)
    return "save_pretrained", ""


def _adapters_apart(adapters: str, fmt: str) -> bool:
    """True for ``adapters="separate"``; raises ExportError for an unknown choice or a format that cannot keep them."""
    if adapters not in ("merged", "separate"):
        raise ExportError(f"adapters must be 'merged' or 'separate', not {adapters!r}")
    if adapters == "separate" and fmt != "hf":
        raise ExportError(f"adapters are saved apart only with the hf format (peft's adapter folder); "
                          f"{fmt} merges them: leave out --adapters separate")
    return adapters == "separate"


def adapter_base(model: nn.Module, source: str = "") -> str:
    """The base model the adapters of ``model`` load onto: the model folder of the run ``source`` belongs to
    (``[model] checkpoint`` / ``source`` of the ``run.toml`` beside it), else the model config's ``_name_or_path``.

    Raises
    ------
    ExportError
        The model has no LoRA adapters, or no base model is known.
    """
    from workbench.core.model.lora import lora_paths
    from workbench.core.train.config import TrainConfig

    if not lora_paths(model):
        raise ExportError("the model has no LoRA adapters to save apart: export it with the adapters merged")
    run_toml = Path(source).with_name("run.toml") if source else None
    if run_toml is not None and run_toml.is_file():
        try:
            cfg = TrainConfig.from_toml(run_toml)
        except (OSError, ValueError, TypeError):
            cfg = None
        for candidate in (cfg.model.checkpoint, cfg.model.source) if cfg is not None else ():
            if candidate and (Path(candidate) / "config.json").is_file():
                return str(candidate)
    base = getattr(getattr(model, "config", None), "_name_or_path", "") or ""
    if not base:
        raise ExportError("no base model is known for the adapters (the model was not opened from a model "
                          "folder): export it with the adapters merged")
    return str(base)


def _write_report(report: ExportReport, target: Path, fmt: str) -> None:
    from workbench.core.files import atomic_write_text

    where = target / REPORT_NAME if FORMATS[fmt][0] is None else target.with_name(REPORT_NAME)
    try:
        atomic_write_text(where, report.to_json() + "\n")
    except OSError as exc:
        report.notes.append(f"{where}: the report could not be written ({exc.strerror or exc})")


def _outputs(out: Any) -> list[tuple[str, torch.Tensor]]:
    flat = flatten_outputs(out)
    if not flat:
        raise ExportError("the model's output holds no tensor: there is nothing to export or compare")
    return flat


def _run_artifact(fmt: str, path: Path, model: nn.Module, spec: Any) -> Any:
    """A callable ``run(example) -> list of arrays / tensors`` for the artifact, in the flattened output order."""
    if fmt == "onnx":
        from workbench.core.export.onnx_format import run_onnx

        return lambda ex: run_onnx(path, model, ex)
    if fmt == "pt2":
        from workbench.core.export.pt2_format import load_pt2

        module = load_pt2(path).module()
        return lambda ex: [t for _, t in flatten_outputs(ex.call(module))]
    from workbench.core.export.weights import reload

    reloaded = reload(fmt, path, model, spec)
    return lambda ex: [t for _, t in flatten_outputs(ex.call(reloaded))]


def _not_run(batch: int, dtype: str, exc: BaseException) -> OutputCheck:
    """A failed check for an artifact that could not be loaded or run, with the first line of why."""
    why = str(exc).splitlines()[0] if isinstance(exc, ExportError) and str(exc) else first_line(exc)
    return OutputCheck(_NOT_RUN, batch, [], float("inf"), float("inf"), *tolerance(dtype), False,
                       f"the artifact could not be run: {why}")


def check_artifact(model: nn.Module, fmt: str, path: str | Path, example: Any, *, dtype: str = "fp32",
                   dynamic_batch: bool = True, spec: Any = None, diagnose: bool = True) -> ExportReport:
    """Run an exported artifact beside ``model`` and compare every output (the check of :func:`export`).

    Parameters
    ----------
    model : nn.Module
        The PyTorch model, in eval mode, in the dtype the artifact was made in, on the CPU.
    fmt : {"onnx", "pt2", "safetensors", "hf"}
    path : str or Path
        The artifact.
    example : Tensor, tuple, dict or ExampleInput
        The batch; with ``dynamic_batch`` a batch of :data:`_EXTRA_ROWS` more rows is run too.
    dtype : {"fp32", "fp16", "bf16"}
        Picks the tolerance.
    spec : optional
        The architecture (safetensors: reopen as Workbench does).
    diagnose : bool
        When an output differs (onnx, pt2), find the first module that differs.

    Returns
    -------
    ExportReport
        ``checked`` True, ``checks`` one per output and batch, ``first_difference`` when found.

    An artifact that cannot be loaded or run (onnxruntime has no bf16 kernels on the CPU)
    fails its check with the reason, as a check row named ``"all outputs"``.
    """
    path = Path(path)
    ex = as_example(example)
    report = ExportReport(fmt, str(path), dtype, checked=True, example=ex.describe())
    try:
        run = _run_artifact(fmt, path, model, spec)
    except Exception as exc:  # noqa: BLE001 - an artifact that cannot be loaded fails its check, said
        report.checks.append(_not_run(batch_size(ex), dtype, exc))
        return report
    batches = [ex] + ([with_batch(ex, batch_size(ex) + _EXTRA_ROWS)] if dynamic_batch else [])
    for batch in batches:
        with torch.no_grad():
            ref = _outputs(batch.call(model))
        try:
            got = list(run(batch))
        except Exception as exc:  # noqa: BLE001 - onnxruntime without a kernel for the dtype, a bad reload...
            report.checks.append(_not_run(batch_size(batch), dtype, exc))
            continue
        if len(got) != len(ref):
            report.notes.append(f"batch {batch_size(batch)}: the artifact gives {len(got)} outputs, "
                                f"the model {len(ref)}; compared in order")
        for (name, r), g in zip(ref, got):
            report.checks.append(compare_output(name, r, g, dtype))
    ran_and_differed = any(not c.passed and c.name != _NOT_RUN for c in report.checks)
    if diagnose and ran_and_differed and fmt in ("onnx", "pt2"):
        _diagnose(report, fmt, path, model, ex, dtype)
    return report


def _diagnose(report: ExportReport, fmt: str, path: Path, model: nn.Module, ex: ExampleInput, dtype: str) -> None:
    try:
        calls = record_module_outputs(model, ex.call)
        if fmt == "onnx":
            from workbench.core.export.onnx_format import onnx_module_values

            values = onnx_module_values(path, model, ex)
        else:
            from workbench.core.export.pt2_format import load_pt2, pt2_module_values

            values = pt2_module_values(load_pt2(path), ex)
    except Exception as exc:  # noqa: BLE001 - the diagnosis is best effort: the check's verdict stands
        report.notes.append(f"the first module that differs could not be found: {first_line(exc)}")
        return
    if not values:
        report.notes.append("the export keeps no module scopes (the TorchScript exporter's): "
                            "the first module that differs cannot be named")
        return
    report.first_difference = first_difference(calls, values, dtype)
    if report.first_difference is None:
        report.notes.append("every module output the export keeps agrees: the difference arises in the model's "
                            "own forward code between its modules")
