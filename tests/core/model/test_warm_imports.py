"""transformers' modeling code imported ahead on a daemon thread (the window does it once shown)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from workbench.core.model import warm_imports

# A fresh process: in this one other tests have imported transformers' modeling code already.
FRESH = textwrap.dedent("""
    import sys
    import transformers
    from workbench.core.model import warm_imports
    from workbench.core.model.opening import open_model

    assert "transformers.modeling_utils" not in sys.modules  # the top level of transformers is lazy
    thread = warm_imports.start()
    assert warm_imports.start() is thread  # once per process
    opened = open_model(sys.argv[1])  # at once, while the imports may still run: waits for them, then opens
    assert not thread.is_alive()
    missing = [m for m in warm_imports.TRANSFORMERS_MODULES if m not in sys.modules]
    assert not missing, missing
    print(type(opened.model).__name__, sum(p.numel() for p in opened.model.parameters()))
""")


def test_the_modeling_code_is_imported_ahead_and_an_open_meanwhile_waits_for_it(tmp_path):
    import transformers

    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                  vocab_size=100, max_position_embeddings=64, num_labels=3)
    model = transformers.BertForSequenceClassification(cfg)
    model.save_pretrained(tmp_path / "bert")
    out = subprocess.run([sys.executable, "-c", FRESH, str(tmp_path / "bert")], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["BertForSequenceClassification", str(sum(p.numel() for p in model.parameters()))]


def test_without_transformers_nothing_starts_and_waiting_returns(monkeypatch):
    monkeypatch.setattr(warm_imports, "_THREAD", None)
    monkeypatch.setattr(warm_imports.contrib, "library_version", lambda dist: None)
    assert warm_imports.start() is None
    warm_imports.wait()  # nothing started: returns at once
    assert warm_imports._THREAD is None
