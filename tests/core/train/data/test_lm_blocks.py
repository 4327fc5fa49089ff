"""Packing text into blocks for a causal LM."""

from __future__ import annotations

import pytest

from tests.core.train.text_models import word_tokenizer

import datasets  # noqa: E402 - in the test extra: fails if missing, never skips
import transformers  # noqa: F401,E402 - in the test extra: fails if missing, never skips

from workbench.core.errors import DataError  # noqa: E402
from workbench.core.train.config import DataConfig  # noqa: E402
from workbench.core.train.data.lm_blocks import lm_datasets, pack, stack_blocks  # noqa: E402


def test_rows_are_joined_and_cut_into_blocks(tmp_path):
    tok = word_tokenizer(["a b c d e"], tmp_path)
    table = datasets.Dataset.from_dict({"text": ["a b c", "d e"]})
    blocks = pack(table, "text", tok, 3, lines=False)  # a b c [EOS] d e [EOS] -> 2 blocks of 3, tail dropped
    eos = tok.eos_token_id
    assert blocks.tolist() == [tok.convert_tokens_to_ids(["a", "b", "c"]),
                               [eos] + tok.convert_tokens_to_ids(["d", "e"])]
    batch = stack_blocks([__import__("torch").tensor(b) for b in blocks])
    assert batch["labels"].tolist() == batch["input_ids"].tolist() and batch["attention_mask"].all()


def test_too_little_text_names_the_file(tmp_path):
    tok_dir = tmp_path / "tok"
    word_tokenizer(["a b"], tok_dir)
    (tmp_path / "t.txt").write_text("a b\n")
    cfg = DataConfig(dataset="text", root=str(tmp_path / "t.txt"), block_size=64)
    with pytest.raises(DataError, match=r"t\.txt: fewer than block_size = 64 tokens"):
        lm_datasets(cfg, __import__("transformers").AutoTokenizer.from_pretrained(str(tok_dir)))
