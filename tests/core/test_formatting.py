"""core.formatting: numbers as the CLI and UI show them."""

from __future__ import annotations

import pytest

from workbench.core.formatting import (
    format_bytes,
    format_count,
    format_flops,
    format_int,
    format_shape,
    parse_shape,
)


@pytest.mark.parametrize(
    ("n", "exact", "count", "size", "flops"),
    [
        (0, "0", "0", "0 B", "0 FLOPs"),
        (999, "999", "999", "999 B", "999 FLOPs"),
        (1000, "1,000", "1.00 K", "1.00 kB", "1.00 KFLOPs"),
        (11_689_512, "11,689,512", "11.7 M", "11.7 MB", "11.7 MFLOPs"),
        (999_999, "999,999", "1.00 M", "1.00 MB", "1.00 MFLOPs"),  # rounding carries into the next unit
        (1_820_000_000, "1,820,000,000", "1.82 B", "1.82 GB", "1.82 GFLOPs"),
        (3_628_146_688, "3,628,146,688", "3.63 B", "3.63 GB", "3.63 GFLOPs"),
        (123_456, "123,456", "123 K", "123 kB", "123 KFLOPs"),
    ],
)
def test_formats(n, exact, count, size, flops):
    assert format_int(n) == exact
    assert format_count(n) == count
    assert format_bytes(n) == size
    assert format_flops(n) == flops


def test_none_is_a_dash():
    assert format_int(None) == format_count(None) == format_bytes(None) == format_flops(None) == "-"
    assert format_shape(None) == "-"


def test_shapes():
    assert format_shape((1, 64, 112, 112)) == "[1, 64, 112, 112]"
    assert format_shape("tuple of 2") == "tuple of 2"
    assert parse_shape("1,3,224,224") == (1, 3, 224, 224)
    assert parse_shape(" (1, 3, 8, 8) ") == (1, 3, 8, 8)
    assert parse_shape("1x3x8x8") == (1, 3, 8, 8)
    assert parse_shape([2, 4]) == (2, 4)
    assert parse_shape("(8,)") == (8,)
    for bad in ["", "1,a", "1,0", "-1,3", "1,x", "1,,3", "1x3,4"]:
        with pytest.raises(ValueError):
            parse_shape(bad)
