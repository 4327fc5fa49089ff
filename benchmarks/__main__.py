"""Run every ``benchmarks/bench_*.py`` and write ``benchmarks/results.json``.

Each module exposes ``run() -> dict[str, float]``: named figures (seconds end in
``_s``, milliseconds in ``_ms``, ratios in ``_ratio``). The merged figures are
printed and written as one flat JSON object. ``python -m benchmarks NAME ...``
runs only the modules whose name contains one of the NAMEs.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

HERE = Path(__file__).resolve().parent


MARKER = "BENCH_RESULT "


def _child(name: str) -> int:
    """Run one benchmark module in this (fresh) process and print its figures after MARKER."""
    try:
        figures = importlib.import_module(f"benchmarks.{name}").run()
    except Exception:
        traceback.print_exc()
        return 1
    print(MARKER + json.dumps(figures), flush=True)
    return 0


def _run_isolated(name: str) -> dict[str, float] | None:
    """Run ``benchmarks.<name>`` in its own Python process; its figures, or None when it failed.

    Each module gets a fresh process so one cannot skew another: torch's thread
    pools, allocator state and page cache warmed by an earlier module would
    otherwise leak into the next one's figures (``bench_training`` measured 0.53x
    after other modules had computed on the main thread, 0.86x on its own).
    """
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks", "--child", name],
        cwd=HERE.parent, stdout=subprocess.PIPE, text=True,
    )
    figures = None
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(MARKER):
            figures = json.loads(line[len(MARKER):])
        else:
            print(line, end="", flush=True)
    return figures if proc.wait() == 0 else None


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; return 0 when every module ran, 1 otherwise."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return _child(argv[1])
    names = sorted(m.name for m in pkgutil.iter_modules([str(HERE)]) if m.name.startswith("bench_"))
    if argv:
        names = [n for n in names if any(a in n for a in argv)]
    results_path = HERE / "results.json"
    results: dict[str, float] = {}
    if results_path.exists() and argv:
        results = json.loads(results_path.read_text())
    failed = []
    for name in names:
        t0 = time.perf_counter()
        print(f"== {name}", flush=True)
        figures = _run_isolated(name)
        if figures is None:  # a broken benchmark must not hide the others' figures
            failed.append(name)
            continue
        for key, value in figures.items():
            print(f"  {key:40s} {value:.4g}", flush=True)
        results.update(figures)
        print(f"  ({time.perf_counter() - t0:.1f} s)", flush=True)
    results_path.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    print(f"wrote {results_path}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
