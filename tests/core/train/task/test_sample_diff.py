"""Samples grouped by step and word-level differences between two completions."""

from __future__ import annotations

from workbench.core.train.task.sample_diff import steps_of, word_diff


def test_rows_are_grouped_by_step_in_order_and_bad_rows_left_out():
    rows = [{"step": 20, "epoch": 1, "prompt": "a", "completion": " b c"},
            {"step": 10, "epoch": 0, "prompt": "a", "completion": " x"},
            {"step": 10, "epoch": 0, "prompt": "z", "completion": " y"},
            {"step": "10", "prompt": "a"}, {"step": True, "prompt": "a"}, {"step": 30, "prompt": 5},
            {"step": 20, "prompt": "z"}]
    steps = steps_of(rows)
    assert [s.step for s in steps] == [10, 20]
    assert steps[0].completions == {"a": " x", "z": " y"} and steps[0].epoch == 0
    assert steps[1].completions == {"a": " b c", "z": ""} and steps[1].epoch == 1


def test_word_diff_marks_added_and_removed_words_and_rebuilds_both_texts():
    before, after = " the cat sat on the mat", " the dog sat on a mat today"
    pieces = word_diff(before, after)
    assert "".join(t for op, t in pieces if op != "removed") == after
    assert "".join(t for op, t in pieces if op != "added") == before
    assert ("added", "dog") in pieces and ("removed", "cat") in pieces
    assert ("added", "a") in pieces and ("removed", "the") in pieces
    assert word_diff("same text", "same text") == [("same", "same text")]
