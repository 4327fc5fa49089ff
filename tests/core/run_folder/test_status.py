"""``status.json`` read whatever is on disk (``workbench.core.run_folder.status``)."""

from __future__ import annotations

import math

import pytest

from workbench.core.run_folder.reading import RunFileError
from workbench.core.run_folder.status import is_time, read_status


@pytest.mark.parametrize("text, match", [
    ('{"state": 3}', "'state' is an integer, not a string"),
    ('{"state": "running", "pid": "123"}', "'pid' is a string, not an integer"),
    ('{"state": "running", "pid": true}', "'pid' is a boolean, not an integer"),
    ('{"started": "yesterday"}', "'started' is a string, not a number"),
    ('{"epochs": -2}', "'epochs' is -2, not a count"),
    ('["state", "finished"]', "a list, not a JSON object"),
    ('{"state": "finis', "not JSON .*truncated"),
    ('', "not JSON"),
    ("[" * 100_000 + "]" * 100_000, "not JSON"),
])


def test_status_json_of_the_wrong_shape_is_said(tmp_path, text, match):
    (tmp_path / "status.json").write_text(text)
    with pytest.raises(RunFileError, match=match):
        read_status(tmp_path)


@pytest.mark.parametrize("text, shown", [
    ('{"state": "finished", "started": 1e20}', "1e+20"),
    ('{"state": "finished", "started": -1e18}', "-1e+18"),
    ('{"state": "finished", "started": Infinity}', "inf"),
    ('{"state": "finished", "started": -Infinity}', "-inf"),
    ('{"state": "finished", "started": NaN}', "nan"),
    ('{"state": "finished", "started": 0}', "0"),
    ('{"state": "finished", "started": 1' + "0" * 400 + "}", "an integer of about 401 digits"),
    ('{"state": "finished", "started": 1e9, "ended": 4e10}', "4e+10"),
])


def test_a_time_a_clock_cannot_show_is_said(tmp_path, text, shown):
    (tmp_path / "status.json").write_text(text)
    key = "ended" if "ended" in text else "started"
    with pytest.raises(RunFileError) as err:
        read_status(tmp_path)
    assert str(err.value) == (f"status.json: '{key}' is {shown}, not a time (seconds since 1970, before the "
                              "year 3000)")


def test_times_a_clock_can_show_are_read():
    assert all(is_time(t) for t in (1e9, 1, 1_700_000_000, 32503679999.0))
    assert not any(is_time(t) for t in (0, -1.0, 32503680000.0, math.inf, math.nan, 10**400, True, "1e9", None))
