"""The training process's priority: which one a run calls for, and its nice value."""

from __future__ import annotations

import pytest

from workbench.core.train.config import DataConfig, TrainConfig
from workbench.core.train.launch.priority import HEADROOM_CORES, LOWER_NICE, default_priority, niceness, run_cores
from workbench.core.train.launch.training_process_main import NICE_INCREMENT


def test_normal_needs_the_runs_cores_and_four_more():
    digits = TrainConfig(data=DataConfig(dataset="digits"))  # in memory: no loader workers
    assert run_cores(digits, threads=4) == 4
    assert default_priority(digits, cores=4 + HEADROOM_CORES, threads=4) == "normal"
    assert default_priority(digits, cores=4 + HEADROOM_CORES - 1, threads=4) == "lower"
    folder = TrainConfig(data=DataConfig(dataset="imagefolder", num_workers=3))
    assert run_cores(folder, threads=4) == 7
    assert default_priority(folder, cores=11, threads=4) == "normal"
    assert default_priority(folder, cores=10, threads=4) == "lower"
    assert default_priority(folder, cores=2, threads=2) == "lower"  # the 2-core reference machine


def test_each_priority_has_its_nice_value():
    assert niceness("normal") == 0 and niceness("lower") == LOWER_NICE == NICE_INCREMENT > 0
    with pytest.raises(ValueError, match="normal, lower"):
        niceness("high")
