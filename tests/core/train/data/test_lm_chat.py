"""Instruction and chat rows for a causal LM: the labels are exactly the answer's tokens, with or without a chat
template; a short run on them; a missing column named."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from tests.core.train.text_models import STORY, tiny_llama_folder, word_tokenizer

import transformers  # noqa: F401,E402 - in the test extra: fails if missing, never skips

from workbench.core.errors import DataError  # noqa: E402
from workbench.core.train.config import DataConfig  # noqa: E402
from workbench.core.train.data.lm_chat import IGNORE_INDEX, PadChat, chat_datasets, encode_row  # noqa: E402

#: A template that writes each turn as "<role> content [EOS] " (the answer's end token is the template's).
TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} [EOS] {% endfor %}"
            "{% if add_generation_prompt %}<assistant> {% endif %}")


def _ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_without_a_template_the_loss_is_on_the_response_and_its_end(tmp_path):
    tok = word_tokenizer(STORY.splitlines(), tmp_path)
    rows = [{"role": "user", "content": "the cat sees the"}, {"role": "assistant", "content": "ball in the garden ."}]
    ids, labels = encode_row(rows, tok, 64)
    answer = labels != IGNORE_INDEX
    assert ids[~answer].tolist() == _ids(tok, "the cat sees the")
    assert ids[answer].tolist() == _ids(tok, "ball in the garden .") + [tok.eos_token_id]
    assert (labels[answer] == ids[answer]).all()
    ids, labels = encode_row(rows, tok, 6)  # cut at its end
    assert len(ids) == 6 and (labels != IGNORE_INDEX).sum() == 2


def test_with_a_chat_template_each_assistant_turn_is_learned(tmp_path):
    tok = word_tokenizer(STORY.splitlines() + ["<system> <user> <assistant>"], tmp_path)
    tok.chat_template = TEMPLATE
    rows = [{"role": "system", "content": "the fox"}, {"role": "user", "content": "the cat sees"},
            {"role": "assistant", "content": "the ball"}, {"role": "user", "content": "the dog"},
            {"role": "assistant", "content": "likes the stick"}]
    ids, labels = encode_row(rows, tok, 64)
    assert ids.tolist() == _ids(tok, tok.apply_chat_template(rows, tokenize=False))  # the template's rendering
    eos = tok.eos_token_id
    learned = ids[labels != IGNORE_INDEX].tolist()
    assert learned == _ids(tok, "the ball") + [eos] + _ids(tok, "likes the stick") + [eos]
    batch = PadChat(tok.pad_token_id)([(torch.tensor(ids), torch.tensor(labels)), (torch.tensor(ids[:3]),
                                                                                   torch.tensor(labels[:3]))])
    assert batch["attention_mask"][1].sum() == 3 and (batch["labels"][1, 3:] == IGNORE_INDEX).all()


def test_a_missing_column_and_an_empty_answer_name_the_file(tmp_path):
    word_tokenizer(STORY.splitlines(), tmp_path / "tok")
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "tok"))
    (tmp_path / "rows.jsonl").write_text(json.dumps({"instruction": "the cat", "output": "sees"}) + "\n")
    cfg = DataConfig(dataset="text", root=str(tmp_path / "rows.jsonl"), prompt="instruction", response="answer")
    with pytest.raises(DataError, match=r"rows\.jsonl: no column 'answer' \(columns: instruction, output\); set "
                                        r"\[data\] response"):
        chat_datasets(cfg, tok, 32)
    (tmp_path / "rows.jsonl").write_text(json.dumps({"instruction": "the cat", "answer": ""}) + "\n")
    with pytest.raises(DataError, match=r"rows\.jsonl: line 1: the column 'answer' is empty"):
        chat_datasets(cfg, tok, 32)
    chat = [{"role": "user", "content": "the cat"}, {"role": "assistant", "content": "sees the ball"}]
    with open(tmp_path / "chat.csv", "w", newline="") as f:  # a conversation as JSON in a CSV cell
        csv.writer(f).writerows([["chat"], [json.dumps(chat)], [json.dumps(chat[:1])], [json.dumps(chat)]])
    cfg = DataConfig(dataset="text", root=str(tmp_path / "chat.csv"), messages="chat", val=str(tmp_path / "chat.csv"))
    with pytest.raises(DataError, match=r"chat\.csv: line 3: the conversation in 'chat' has no assistant message"):
        chat_datasets(cfg, tok, 32)


def test_a_short_instruction_run_has_a_finite_loss_and_samples_the_prompts(tmp_path):
    folder = tiny_llama_folder(tmp_path / "llama")
    lines = [line.split() for line in STORY.splitlines()]
    rows = [{"prompt": " ".join(w[:4]), "response": " ".join(w[4:])} for w in lines]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run.toml"
    run.write_text(f"""epochs = 1
optimizer = "adamw"
lr = 0.003
tensorboard = false
checkpoint_every_epoch = false
run_dir = "{tmp_path / 'out'}"
[model]
checkpoint = "{folder}"
[task]
kind = "causal_lm"
max_new_tokens = 4
[data]
dataset = "text"
root = "{tmp_path / 'rows.jsonl'}"
prompt = "prompt"
response = "response"
batch_size = 8
""")
    from workbench.core.train.launch.headless import trainer_from_toml

    out: list[str] = []
    torch.manual_seed(0)
    trainer = trainer_from_toml(run, out=out.append)
    assert trainer is not None and trainer.fit() == "completed", out
    metrics = list(csv.DictReader(open(tmp_path / "out" / "metrics.csv")))
    assert math.isfinite(float(metrics[-1]["train_loss"])) and math.isfinite(float(metrics[-1]["val_loss"]))
    samples = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    prompts = {r["prompt"] for r in rows}
    assert samples and all(s["prompt"] in prompts for s in samples), samples  # each row's instruction


def test_the_run_file_takes_prompt_with_response_or_messages_for_a_causal_lm():
    from workbench.core.train.config import TrainConfig

    def check(task: str, **data):
        cfg = TrainConfig()
        cfg.task.kind, cfg.data.dataset = task, "text"
        for key, value in data.items():
            setattr(cfg.data, key, value)
        cfg.validate()

    check("causal_lm", prompt="q", response="a")
    check("causal_lm", messages="chat")
    with pytest.raises(ValueError, match="give both"):
        check("causal_lm", prompt="q")
    with pytest.raises(ValueError, match="instead of them"):
        check("causal_lm", prompt="q", response="a", messages="chat")
    with pytest.raises(ValueError, match="task.kind = \"causal_lm\""):
        check("text_classification", messages="chat")
