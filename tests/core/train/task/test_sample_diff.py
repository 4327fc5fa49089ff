"""Samples grouped by step and word-level differences between two completions."""

from __future__ import annotations

from workbench.core.train.task.sample_diff import compare_steps, nearest_step, steps_of, word_diff


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


def test_on_demand_steps_are_marked_and_compared_like_evaluations():
    rows = [{"step": 4, "prompt": "a", "completion": " x y"},
            {"step": 6, "epoch": 1, "prompt": "a", "completion": " x z", "on_demand": True},
            {"step": 8, "epoch": 1, "prompt": "a", "completion": " w", "on_demand": True},
            {"step": 8, "epoch": 1, "prompt": "b", "completion": " v"}]  # an evaluation at that step too
    steps = steps_of(rows)
    assert [(s.step, s.on_demand) for s in steps] == [(4, False), (6, True), (8, False)]
    (d,) = compare_steps(steps[1], steps[0])
    assert (d.prompt, d.against_step, d.pieces) == ("a", 4, [("same", " x "), ("removed", "y"), ("added", "z")])
    a, b = compare_steps(steps[2], steps[0])
    assert a.against_step == 4 and (b.against_step, b.pieces) == (None, [("same", " v")])  # 4 never had "b"
    assert compare_steps(steps[0], None)[0].pieces == [("same", " x y")]
    assert nearest_step(steps, 5, "a").step == 4  # a tie (4 and 6): the earlier
    assert nearest_step(steps, 7, "b").step == 8 and nearest_step(steps, 7, "c") is None
