"""``workbench index [--rebuild]``: the architecture index that ranks checkpoints: its status, or a rebuild."""

from __future__ import annotations

import argparse
import sys

__all__ = ["NAME", "USAGE", "SUMMARY", "add_arguments", "run"]

NAME = "index"
USAGE = "[--rebuild]"
SUMMARY = "the architecture index that ranks checkpoints (torchvision, timm): status or rebuild"
DESCRIPTION = ("The architecture index: every known architecture's state_dict keys and shapes (torchvision, "
               "timm when installed, registered contributions), built once per library version in the cache "
               "folder ($WORKBENCH_CACHE_DIR, else $XDG_CACHE_HOME/workbench or ~/.cache/workbench) and read "
               "when a checkpoint's architecture is detected. Without options: what is built.")
EPILOG = None
SUBJECT = None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``workbench index``: ``--rebuild``."""
    parser.add_argument("--rebuild", action="store_true",
                        help="build everything again, every timm family included (about a minute), with a progress line")


def _progress(done: int, total: int, what: str) -> None:
    """One progress line on stderr, rewritten in place."""
    print(f"\rindexing {what[:60]:<60} {done}/{total}", end="", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Rebuild the index with ``--rebuild``; print what is built (one line); 0."""
    import time

    from workbench.core.model import arch_index, detection

    arch_index.use_builder(detection.candidate_builder)  # (detection registers it on import too)
    if args.rebuild:
        t0 = time.perf_counter()
        live = sys.stderr.isatty()
        counts = arch_index.rebuild(_progress if live else None)
        if live:
            print(file=sys.stderr)
        print(f"indexed {counts['torchvision']} torchvision, {counts['timm']} timm and "
              f"{counts['contributions']} contributed architectures in {time.perf_counter() - t0:.1f} s")
    st = arch_index.status()
    timm = (f"timm {st['timm']}: {st['timm_built']} of {st['timm_families']} families built"
            if st["timm"] else "timm: not installed")
    print(f"{st['folder']}: torchvision {'built' if st['torchvision'] else 'not built'}, "
          f"contributions {'built' if st['contributions'] else 'not built'}, {timm}; "
          f"{st['bytes'] / 2**20:.1f} MiB")
    return 0
