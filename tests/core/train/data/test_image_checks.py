"""The image check cache: a second Start on an unchanged folder opens no image; a changed or bad file is checked again."""

from __future__ import annotations

import os

import PIL.Image
import pytest

from tests.image_folders import jpeg_folder
from workbench.core.train.data.image_checks import ImageCheckCache
from workbench.core.train.data.preflight import unreadable_images


@pytest.fixture
def opened(monkeypatch):
    """The paths PIL opens, in order."""
    seen: list[str] = []
    real = PIL.Image.open

    def counting(fp, *args, **kwargs):
        seen.append(str(fp))
        return real(fp, *args, **kwargs)

    monkeypatch.setattr(PIL.Image, "open", counting)
    return seen


def _files(root) -> list[str]:
    return sorted(str(p) for p in root.rglob("*.jpg"))


def test_an_unchanged_folder_is_not_opened_again(tmp_path, opened):
    jpeg_folder(tmp_path / "photos", per_class=5)
    files = _files(tmp_path / "photos")
    cache_dir = tmp_path / "cache"
    assert unreadable_images(files, cache=ImageCheckCache(files, cache_dir)) == []
    assert len(opened) == len(files) == 20
    opened.clear()
    assert unreadable_images(files, cache=ImageCheckCache(files, cache_dir)) == []  # a new Start: read from disk
    assert opened == []


def test_a_changed_file_and_a_bad_file_are_checked_at_every_start(tmp_path, opened):
    jpeg_folder(tmp_path / "photos", per_class=3)
    files = _files(tmp_path / "photos")
    bad, changed = files[0], files[1]
    with open(bad, "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 not a JPEG any more")
    cache_dir = tmp_path / "cache"
    first = unreadable_images(files, cache=ImageCheckCache(files, cache_dir))
    assert len(first) == 1 and first[0].startswith(bad)
    st = os.stat(changed)
    os.utime(changed, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    opened.clear()
    again = unreadable_images(files, cache=ImageCheckCache(files, cache_dir))
    assert again == first and opened == [bad, changed]


def test_a_cache_folder_that_cannot_be_written_costs_only_time(tmp_path, opened):
    jpeg_folder(tmp_path / "photos", per_class=2)
    files = _files(tmp_path / "photos")
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder should be")
    assert unreadable_images(files, cache=ImageCheckCache(files, blocked / "image_checks")) == []
    assert unreadable_images(files, cache=ImageCheckCache(files, blocked / "image_checks")) == []
    assert len(opened) == 2 * len(files)


def test_a_damaged_cache_file_is_ignored(tmp_path, opened):
    jpeg_folder(tmp_path / "photos", per_class=2)
    files = _files(tmp_path / "photos")
    cache = ImageCheckCache(files, tmp_path / "cache")
    unreadable_images(files, cache=cache)
    cache.file.write_text("{not json")
    opened.clear()
    assert unreadable_images(files, cache=ImageCheckCache(files, tmp_path / "cache")) == []
    assert len(opened) == len(files)
