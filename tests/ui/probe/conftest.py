"""Fixtures of the Probes panel tests."""

from __future__ import annotations

import pytest

from tests.ui.helpers import make_session
from workbench.core.model.demo import DEMO_INPUT_SHAPE, DigitsCNN
from workbench.ui.probe.panel import ProbesPanel


@pytest.fixture
def shown_panel(qtbot):
    """A ProbesPanel over the digits demo, shown at 900x520 (its first tab, Activations, current)."""
    p = ProbesPanel(make_session(DigitsCNN(), input_shape=DEMO_INPUT_SHAPE))
    qtbot.addWidget(p)
    p.resize(900, 520)
    p.show()
    yield p
    p.shutdown()
