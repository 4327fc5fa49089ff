"""``[data] dataset = "text"`` for token classification: word lists and tag lists, tags on each word's first
sub-token, and a bad row named by its file and line."""

from __future__ import annotations

import json

import pytest

from tests.core.train.text_models import minilm_folder

import transformers  # noqa: F401,E402 - in the test extra: fails if missing, never skips
import datasets  # noqa: F401,E402 - in the test extra: fails if missing, never skips

from workbench.core.errors import DataError  # noqa: E402
from workbench.core.train.config import DataConfig  # noqa: E402
from workbench.core.train.data.text import IGNORE_INDEX, tag_classes, text_loaders  # noqa: E402

ROWS = [(["Ouagadougou", "is", "far"], ["LOC", "O", "O"]), (["we", "met", "in", "Oslo"], ["O", "O", "O", "LOC"]),
        (["Reykjavik", "and", "Oslo"], ["LOC", "O", "LOC"]), (["it", "rains"], ["O", "O"])]


def _csv(path, rows) -> None:
    import csv

    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["tokens", "tags"])
        w.writerows([json.dumps(words), json.dumps(tags)] for words, tags in rows)


def test_tags_go_to_the_first_sub_token_of_each_word(tmp_path):
    """CSV cells holding JSON lists; MiniLM's WordPiece splits the long city names into several pieces."""
    _csv(tmp_path / "train.csv", ROWS)
    _csv(tmp_path / "val.csv", ROWS[:2])
    folder = minilm_folder()
    cfg = DataConfig(dataset="text", root=str(tmp_path / "train.csv"), val=str(tmp_path / "val.csv"),
                     tokenizer=str(folder), batch_size=4, shuffle=False, max_length=16)
    assert tag_classes(cfg) == ["LOC", "O"]
    train, val, fields = text_loaders(cfg, task="token_classification")
    assert (fields["task"], fields["classes"], fields["train_size"], fields["val_size"]) == \
        ("token_classification", ["LOC", "O"], 4, 2)
    batch = next(iter(train))
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    for row, (words, tags) in enumerate(ROWS):
        labels = batch["labels"][row].tolist()
        kept = [(pos, lab) for pos, lab in enumerate(labels) if lab != IGNORE_INDEX]
        assert [lab for _, lab in kept] == [["LOC", "O"].index(t) for t in tags]  # one label per word, in order
        for (pos, _), word in zip(kept, words):  # at the word's first piece
            assert tok.convert_ids_to_tokens(int(batch["input_ids"][row, pos])) == tok.tokenize(word)[0]
        assert labels[0] == IGNORE_INDEX  # [CLS]
    pieces = len(tok.tokenize("Ouagadougou"))
    assert pieces > 1 and batch["labels"][0, 2:1 + pieces].eq(IGNORE_INDEX).all()  # later pieces: no tag
    assert batch["labels"].shape == batch["input_ids"].shape


def test_a_row_with_more_tags_than_words_names_its_line(tmp_path):
    (tmp_path / "train.jsonl").write_text("\n".join(json.dumps({"tokens": w, "tags": t}) for w, t in ROWS)
                                          + "\n" + json.dumps({"tokens": ["a", "b"], "tags": ["O"]}) + "\n")
    cfg = DataConfig(dataset="text", root=str(tmp_path / "train.jsonl"), tokenizer=str(minilm_folder()))
    with pytest.raises(DataError, match=r"train\.jsonl: line 5: 2 words in 'tokens' but 1 tags in 'tags'"):
        text_loaders(cfg, task="token_classification")


def test_a_csv_cell_that_is_not_a_json_list(tmp_path):
    (tmp_path / "train.csv").write_text('tokens,tags\n"[""a""]","[""O""]"\nplain words,O\n')
    cfg = DataConfig(dataset="text", root=str(tmp_path / "train.csv"), tokenizer=str(minilm_folder()))
    with pytest.raises(DataError, match=r"train\.csv: line 3: the column 'tokens' is not a non-empty list"):
        text_loaders(cfg, task="token_classification")
