"""Atomic writes: the temporary file of a killed save is removed at the next save or open of its folder,
never while its writer is alive."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from workbench.core.files import (
    ORPHAN_AFTER_S,
    STALE_AFTER_S,
    atomic_save,
    atomic_write_bytes,
    is_stale_temp,
    remove_stale_temps,
    temp_prefix,
)
from workbench.core.model.formats import read_checkpoint

#: A child that starts saving 20 MB into last.pt, writes half, says so on stdout and hangs (until killed).
WRITER = textwrap.dedent("""
    import sys, time
    from workbench.core.files import atomic_write

    def write(f):
        f.write(b"x" * 10_000_000)
        f.flush()
        print("half", flush=True)
        time.sleep(600)
        f.write(b"y" * 10_000_000)

    atomic_write(sys.argv[1], write)
""")


def temps(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


@pytest.fixture
def writer(tmp_path):
    """A live child process in the middle of an atomic write of ``tmp_path/last.pt``."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path / "last.pt")], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "half"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


@pytest.mark.skipif(os.name != "posix", reason="a writer's pid is checked on POSIX only")
def test_a_killed_save_leaves_a_temp_file_that_the_next_save_removes(tmp_path, writer):
    (name,) = temps(tmp_path)
    assert name.startswith(f".last.pt.{writer.pid}-") and (tmp_path / name).stat().st_size == 10_000_000
    atomic_save({"w": torch.ones(3), "epoch": 1}, tmp_path / "best.pt")  # a live writer's file stays
    assert temps(tmp_path) == [name]
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    assert temps(tmp_path) == [name]  # nothing removes it by itself
    atomic_save({"w": torch.ones(3), "epoch": 2}, tmp_path / "best.pt")
    assert temps(tmp_path) == []
    assert not (tmp_path / "last.pt").exists()


@pytest.mark.skipif(os.name != "posix", reason="a writer's pid is checked on POSIX only")
def test_opening_a_checkpoint_removes_its_folders_stale_temps(tmp_path, writer):
    path = atomic_save({"model_state_dict": {"w": torch.ones(3)}, "epoch": 1}, tmp_path / "best.pt")
    (name,) = temps(tmp_path)
    read_checkpoint(path)
    assert temps(tmp_path) == [name]
    writer.kill()
    writer.wait(timeout=30)
    read_checkpoint(path)
    assert temps(tmp_path) == []


def test_older_workbench_temps_go_once_untouched(tmp_path):
    """``.NAME.<random>.tmp`` (no pid: written before this version) is removed after STALE_AFTER_S without writes."""
    fresh, old = tmp_path / ".last.pt.ab_cd123.tmp", tmp_path / ".best.pt.k3j9x0q1.tmp"
    for p in (fresh, old):
        p.write_bytes(b"x" * 1000)
    t = time.time() - STALE_AFTER_S - 5
    os.utime(old, (t, t))
    assert remove_stale_temps(tmp_path) == [old]
    assert temps(tmp_path) == [fresh.name]


def test_only_workbenchs_own_temp_names_are_touched(tmp_path):
    t = time.time() - ORPHAN_AFTER_S - 5
    names = [".last.pt.tmp", ".notes.txt.12345678.tmp.bak", "last.pt.abcdefgh.tmp", ".x.ABCDEFGH.tmp",
             ".last.pt.abc.tmp", ".last.pt.999999999-zzzzzzzz-abcdefgh.tmp"]
    for n in names:
        (tmp_path / n).write_bytes(b"")
        os.utime(tmp_path / n, (t, t))
    (tmp_path / ".dir.abcdefgh.tmp").mkdir()
    os.utime(tmp_path / ".dir.abcdefgh.tmp", (t, t))
    if os.name == "posix":
        os.symlink(tmp_path / names[0], tmp_path / ".link.abcdefgh.tmp")
    assert remove_stale_temps(tmp_path) == []


def test_pid_rules():
    now = time.time()
    mine = temp_prefix("last.pt") + "abcd1234.tmp"
    assert not is_stale_temp(mine, now - 3600, now)  # this process is alive
    assert is_stale_temp(mine, now - ORPHAN_AFTER_S - 1, now)  # a pid alive for a day: reused
    host = temp_prefix("x").split("-")[1]
    other_host = f".last.pt.999999999-{'00000000' if host != '00000000' else '11111111'}-abcd1234.tmp"
    assert not is_stale_temp(other_host, now - 10, now)  # a pid dead here, but of another host:
    assert is_stale_temp(other_host, now - STALE_AFTER_S - 1, now)  # only the age counts
    assert not is_stale_temp("last.pt", now - ORPHAN_AFTER_S - 1, now)


@pytest.mark.skipif(os.name != "posix", reason="a writer's pid is checked on POSIX only")
def test_a_dead_writers_temp_goes_at_once(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(proc.stdout)
    name = temp_prefix("last.pt").replace(f".{os.getpid()}-", f".{dead}-") + "abcd1234.tmp"
    (tmp_path / name).write_bytes(b"x")
    atomic_write_bytes(tmp_path / "status.json", b"{}")
    assert temps(tmp_path) == []


def test_a_failed_write_leaves_nothing(tmp_path):
    def boom(f):
        f.write(b"partial")
        raise RuntimeError("disk on fire")

    from workbench.core.files import atomic_write

    (tmp_path / "last.pt").write_bytes(b"previous")
    with pytest.raises(RuntimeError):
        atomic_write(tmp_path / "last.pt", boom)
    assert temps(tmp_path) == [] and (tmp_path / "last.pt").read_bytes() == b"previous"


def test_other_programs_temp_files_survive_however_old(tmp_path):
    """The bare ``.NAME.<8 chars>.tmp`` form is also other programs' mkstemp idiom: only Workbench's
    own targets (checkpoints, run files) count; a document's temp file is never removed."""
    t = time.time() - ORPHAN_AFTER_S - 5
    foreign = [".thesis.docx.q1w2e3r4.tmp", ".data.csv.q1w2e3r4.tmp", ".notes.md.abcdefgh.tmp",
               ".config.json.abcd_123.tmp", ".pyproject.toml.abcdefgh.tmp", ".model.pt.txt.abcdefgh.tmp"]
    legacy = [".last.pt.q1w2e3r4.tmp", ".best.pt.abcdefgh.tmp", ".init.pt.a1b2c3d4.tmp", ".epoch_3.pt.abcdefgh.tmp",
              ".model.safetensors.abcdefgh.tmp", ".weights.PTH.abcdefgh.tmp", ".run.ckpt.abcdefgh.tmp",
              ".status.json.abcdefgh.tmp", ".run.toml.abcdefgh.tmp", ".metrics.csv.abcdefgh.tmp",
              ".lr_find.csv.abcdefgh.tmp"]
    for n in foreign + legacy:
        (tmp_path / n).write_bytes(b"x")
        os.utime(tmp_path / n, (t, t))
    removed = remove_stale_temps(tmp_path)
    assert sorted(p.name for p in removed) == sorted(legacy)
    assert temps(tmp_path) == sorted(foreign)
    for n in foreign:
        assert not is_stale_temp(n, t)
    # Workbench's own tagged form, of any target (File > Export summary writes notes.md): still removed
    other_host = "00000000" if temp_prefix("x").split("-")[1] != "00000000" else "11111111"
    tagged = tmp_path / f".notes.md.999999999-{other_host}-abcdefgh.tmp"
    tagged.write_bytes(b"x")
    os.utime(tagged, (t, t))
    assert remove_stale_temps(tmp_path) == [tagged]


def test_opening_a_checkpoint_keeps_a_documents_temp_file(tmp_path):
    path = atomic_save({"model_state_dict": {"w": torch.ones(3)}, "epoch": 1}, tmp_path / "best.pt")
    doc = tmp_path / ".thesis.docx.q1w2e3r4.tmp"
    doc.write_bytes(b"half a thesis")
    t = time.time() - STALE_AFTER_S - 60
    os.utime(doc, (t, t))
    read_checkpoint(path)
    atomic_save({"model_state_dict": {"w": torch.ones(3)}, "epoch": 2}, tmp_path / "best.pt")
    assert doc.read_bytes() == b"half a thesis"


def test_jsonl_rows_are_appended_whole_or_not_at_all_and_read_back(small_disk):
    """A full disk cuts a batch of rows back whole: the rows before it and after it read, none half."""
    from tests.disk import fill_disk
    from workbench.core.files import append_jsonl, read_jsonl

    path = small_disk / "samples.jsonl"
    append_jsonl(path, [{"step": 1, "completion": "a"}])
    filler = fill_disk(small_disk)
    with pytest.raises(OSError):  # 10 kB on a full disk
        append_jsonl(path, [{"step": 2, "completion": "x" * 200}] * 50)
    assert path.read_bytes().endswith(b"\n")
    filler.unlink()
    append_jsonl(path, [{"step": 3, "completion": "b"}])
    path.write_bytes(path.read_bytes() + b"not json\n")
    assert [r["step"] for r in read_jsonl(path)] == [1, 3]
