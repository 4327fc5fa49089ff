"""transformers' modeling code imported ahead on a daemon thread (the window starts it), never on two threads."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from workbench.core import warm_imports

#: A fresh process (in this one, other tests imported transformers' modeling code already). The last
#: import ahead is a module of the test's that takes SLOW_S: an open that did not wait returns before it.
FRESH = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from workbench.core import warm_imports
    from workbench.core.model.opening import open_model

    warm_imports.TRANSFORMERS_MODULES += ("slow_import_for_test",)
    assert "transformers.modeling_utils" not in sys.modules
    thread = warm_imports.start()
    assert warm_imports.start() is thread  # once per process
    opened = open_model(sys.argv[1])  # at once, while the imports ahead run: waits for them, then opens
    assert not thread.is_alive(), "the open did not wait for the imports ahead"
    assert "slow_import_for_test" in sys.modules and "transformers.modeling_utils" in sys.modules
    print(type(opened.model).__name__, sum(p.numel() for p in opened.model.parameters()))
""")
SLOW_S = 8

CLAIMED_FIRST = textwrap.dedent("""
    import sys
    from workbench.core import warm_imports
    from workbench.core.model.opening import open_model

    opened = open_model(sys.argv[1])  # before the window's timer: this open imports transformers itself
    assert warm_imports.start() is None  # and the imports ahead never start beside it
    print(type(opened.model).__name__)
""")


def _bert_folder(path):
    import transformers

    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                  vocab_size=100, max_position_embeddings=64, num_labels=3)
    model = transformers.BertForSequenceClassification(cfg)
    model.save_pretrained(path)
    return model


def test_an_open_while_the_imports_ahead_run_waits_for_them(tmp_path):
    model = _bert_folder(tmp_path / "bert")
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "slow_import_for_test.py").write_text(f"import time\ntime.sleep({SLOW_S})\n")
    out = subprocess.run([sys.executable, "-c", FRESH, str(tmp_path / "bert"), str(tmp_path / "mods")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["BertForSequenceClassification", str(sum(p.numel() for p in model.parameters()))]


def test_an_open_before_the_imports_ahead_keeps_them_from_starting(tmp_path):
    _bert_folder(tmp_path / "bert")
    out = subprocess.run([sys.executable, "-c", CLAIMED_FIRST, str(tmp_path / "bert")], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["BertForSequenceClassification"]


def test_without_transformers_nothing_starts_and_claiming_returns(monkeypatch):
    monkeypatch.setattr(warm_imports, "_THREAD", None)
    monkeypatch.setattr(warm_imports, "_CLAIMED", False)
    monkeypatch.setattr(warm_imports, "_installed", lambda dist: False)
    assert warm_imports.start() is None and warm_imports._THREAD is None
    warm_imports.claim()  # nothing running: returns at once
    assert warm_imports._CLAIMED
