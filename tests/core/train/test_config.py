"""The run settings (workbench.core.train.config): TOML and dict round-trips, the checks with their messages,
the unfreeze schedule text, and the settings a checkpoint records.

``TrainConfig.from_toml`` reads a run file through the total reader (``run_folder.reading.read_text_file``): a FIFO, a
device or a folder is refused at once, bytes that are not UTF-8 are said with the file's name (real files on disk)."""

from __future__ import annotations

import os

import pytest

from tests.core.train.damaged_runs import within
from workbench.core.run_folder.reading import NotATextFile
from workbench.core.train.config import (
    DataConfig,
    ModelConfig,
    TaskConfig,
    TrainConfig,
    format_unfreeze,
    parse_unfreeze,
    settings_from_checkpoint,
)
from workbench.core.train.launch.headless import train_from_toml

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
GOOD = 'epochs = 0\n[model]\narch = "digits_cnn"\n[data]\ndataset = "digits"\n'


@needs_fifo
def test_a_fifo_run_toml_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "run.toml")
    with pytest.raises(NotATextFile, match=f"^{tmp_path / 'run.toml'}: a FIFO, not a regular file$"):
        within(lambda: TrainConfig.from_toml(tmp_path / "run.toml"), timeout=5)  # hung forever before
    lines = []
    assert within(lambda: train_from_toml(tmp_path / "run.toml", out=lines.append), timeout=30) == 1
    assert lines == [f"error: {tmp_path / 'run.toml'}: a FIFO, not a regular file"]


def test_a_run_toml_linked_to_dev_zero_is_refused_unread(tmp_path):
    (tmp_path / "run.toml").symlink_to("/dev/zero")  # read until memory ran out before
    with pytest.raises(ValueError, match="run.toml: a character device, not a regular file"):
        within(lambda: TrainConfig.from_toml(str(tmp_path / "run.toml")), timeout=5)
    lines = []
    assert within(lambda: train_from_toml(tmp_path / "run.toml", out=lines.append), timeout=30) == 1
    assert lines == [f"error: {tmp_path / 'run.toml'}: a character device, not a regular file"]


def test_a_byte_that_is_not_utf8_is_said_with_the_files_name(tmp_path):
    path = tmp_path / "run.toml"
    path.write_bytes(GOOD.encode().replace(b"digits_cnn", b"digits\xffcnn"))
    with pytest.raises(ValueError) as err:
        TrainConfig.from_toml(path)
    assert str(err.value) == f"{path}: not UTF-8 (byte 0xff at offset 33)"
    lines = []
    assert train_from_toml(path, out=lines.append) == 1
    assert lines == [f"error: {path}: not UTF-8 (byte 0xff at offset 33)"]


def test_a_folder_a_huge_file_and_deep_nesting_are_value_errors_naming_the_file(tmp_path):
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(ValueError, match="dir.toml: a folder, not a regular file"):
        TrainConfig.from_toml(tmp_path / "dir.toml")
    with open(tmp_path / "huge.toml", "wb") as f:
        f.truncate(2**31)  # sparse
    with pytest.raises(ValueError, match="huge.toml: larger than 4 MB"):
        within(lambda: TrainConfig.from_toml(tmp_path / "huge.toml"), timeout=5)
    (tmp_path / "deep.toml").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ValueError, match="deep.toml: not TOML \\(nested too deeply\\)"):
        TrainConfig.from_toml(tmp_path / "deep.toml")
    with pytest.raises(FileNotFoundError):
        TrainConfig.from_toml(tmp_path / "missing.toml")


def test_a_good_file_a_path_holding_an_equals_sign_and_text_are_read(tmp_path):
    folder = tmp_path / "lr=0.1"  # a str path with "=" was taken for TOML text
    folder.mkdir()
    (folder / "run.toml").write_text(GOOD)
    assert TrainConfig.from_toml(str(folder / "run.toml")).model.arch == "digits_cnn"
    assert TrainConfig.from_toml(folder / "run.toml").data.dataset == "digits"
    assert TrainConfig.from_toml(GOOD).model.arch == "digits_cnn"
    assert TrainConfig.from_toml("epochs = 4").epochs == 4


def test_every_setting_survives_a_toml_file_and_a_dict(tmp_path):
    cfg = TrainConfig(data=DataConfig(dataset="fake", fake_shape=[1, 8, 8], batch_size=7, num_workers=3),
                      model=ModelConfig(arch="resnet18", kwargs={"num_classes": 4}, frozen=["conv1"]),
                      task=TaskConfig(kind="regression", metrics=["mae", "r2"], monitor="val_mae"),
                      epochs=3, optimizer="sgd", lr=0.05, nesterov=True, scheduler="cosine", grad_clip=1.5,
                      channels_last=False, unfreeze=[{"epoch": 2, "module": "layer4", "lr_factor": 0.1}])
    text = cfg.to_toml(tmp_path / "run.toml")
    assert (tmp_path / "run.toml").read_text() == text
    assert "grad_clip = 1.5" in text and "run_dir" not in text  # None is left out: TOML has no null
    assert TrainConfig.from_toml(tmp_path / "run.toml") == cfg
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert TrainConfig.from_dict({}) == TrainConfig()


def test_an_unknown_key_is_named_with_its_table_and_the_known_ones():
    with pytest.raises(ValueError, match=r"^unknown setting\(s\) in \[data\]: batchsize; known: dataset, root, "):
        TrainConfig.from_dict({"data": {"batchsize": 8}})
    with pytest.raises(ValueError, match=r"^unknown setting\(s\) in top level: epoch, lrate; known: data, model"):
        TrainConfig.from_dict({"lrate": 0.1, "epoch": 2})


def test_a_value_of_the_wrong_kind_says_the_kind_expected():
    with pytest.raises(ValueError, match=r"^lr = 'fast' in top level: expected a number \(e.g. 0.001 or 1e-3\)$"):
        TrainConfig.from_dict({"lr": "fast"})
    with pytest.raises(ValueError, match=r"^epochs = True in top level: expected a whole number$"):
        TrainConfig.from_dict({"epochs": True})
    with pytest.raises(ValueError, match=r'^num_workers = -1 in \[data\]: expected "auto" or a whole number >= 0$'):
        TrainConfig.from_dict({"data": {"num_workers": -1}})
    with pytest.raises(ValueError, match=r'^pin_memory = 1 in \[data\]: expected "auto" or true or false$'):
        TrainConfig.from_dict({"data": {"pin_memory": 1}})
    assert TrainConfig.from_dict({"lr": 1}).lr == 1  # a whole number is a number
    assert TrainConfig.from_dict({"data": {"num_workers": 0}}).data.num_workers == 0


@pytest.mark.parametrize("settings, message", [
    ({"loss": "hinge"}, "loss = 'hinge' is not one of cross_entropy, mse, bce_with_logits, l1"),
    ({"task": {"mode": "up"}}, "task.mode = 'up' is not one of min, max"),
    ({"data": {"dataset": "imagenet"}}, "data.dataset = 'imagenet' is not one of digits, mnist, "),
    ({"epochs": -1}, "epochs must be >= 0 and data.batch_size >= 1"),
    ({"data": {"batch_size": 0}}, "epochs must be >= 0 and data.batch_size >= 1"),
    ({"unfreeze": [{"epoch": 0, "module": "fc"}]}, "unfreeze[0] = {'epoch': 0, 'module': 'fc'}: expected {epoch"),
    ({"unfreeze": [{"epoch": 2, "module": "fc", "lr_factor": 0}]}, "unfreeze[0] = {'epoch': 2, 'module': 'fc', "),
])
def test_validation_names_the_field_and_the_bad_value(settings, message):
    with pytest.raises(ValueError) as err:
        TrainConfig.from_dict(settings)
    assert str(err.value).startswith(message)


def test_a_dataset_spec_passes_validation_without_being_imported():
    cfg = TrainConfig.from_dict({"data": {"dataset": "no_such_module_xyz:make"}})
    assert cfg.data.dataset == "no_such_module_xyz:make"


def test_the_unfreeze_schedule_text_reads_back_and_refuses_what_it_cannot_read():
    entries = parse_unfreeze(" 5: layer3*0.5, layer2 ; 3: layer4;")
    assert entries == [{"epoch": 5, "module": "layer3", "lr_factor": 0.5}, {"epoch": 5, "module": "layer2"},
                       {"epoch": 3, "module": "layer4"}]
    assert format_unfreeze(entries) == "3: layer4; 5: layer3*0.5, layer2"
    assert parse_unfreeze("") == [] and format_unfreeze([]) == ""
    with pytest.raises(ValueError, match=r"^unfreeze schedule 'layer4': expected <epoch>: <module>"):
        parse_unfreeze("layer4")
    with pytest.raises(ValueError, match=r"'\*2' is not <module>\*<LR factor > 0>"):
        parse_unfreeze("2: *2")


def test_settings_from_checkpoint_prefer_the_run_toml_then_the_config_then_the_optimizer(tmp_path):
    ckpt = tmp_path / "last.pt"
    raw = {"config": TrainConfig(epochs=9, lr=0.2, run_dir="old").to_dict()}
    from_raw = settings_from_checkpoint(ckpt, raw)
    assert (from_raw.epochs, from_raw.lr, from_raw.run_dir) == (9, 0.2, None)  # a new run gets a new folder
    TrainConfig(epochs=2, optimizer="rmsprop", run_dir=str(tmp_path)).to_toml(tmp_path / "run.toml")
    beside = settings_from_checkpoint(ckpt, raw)
    assert (beside.epochs, beside.optimizer, beside.run_dir) == (2, "rmsprop", None)
    guessed = settings_from_checkpoint(None, {"state_dict": {}}, "SGD",
                                       {"lr": 0.3, "momentum": 0.8, "nesterov": True, "weight_decay": "x"})
    assert (guessed.optimizer, guessed.lr, guessed.momentum, guessed.nesterov, guessed.weight_decay) == \
        ("sgd", 0.3, 0.8, True, 0.0)
    assert settings_from_checkpoint(None, {"config": {"loss": "hinge"}}, "LBFGS") is None
    assert settings_from_checkpoint(None, None) is None


def test_a_single_target_or_feature_column_may_be_a_string(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[data]\ndataset = "csv"\nroot = "houses.csv"\ntarget = "price"\nfeatures = "rooms"\n')
    cfg = TrainConfig.from_toml(path)
    assert cfg.data.target == ["price"] and cfg.data.features == ["rooms"]
    with pytest.raises(ValueError, match=r"target = 3 in \[data\]: expected a list"):
        TrainConfig.from_dict({"data": {"target": 3}})


def test_the_pause_lease_keys_default_round_trip_and_refuse_a_bad_value_naming_the_file(tmp_path):
    from workbench.core.attach.lease import LEASE_MODES, PAUSE_LEASE_S

    cfg = TrainConfig()
    assert (cfg.pause_lease_s, cfg.pause_lease) == (PAUSE_LEASE_S, "resume") == (120.0, "resume")
    path = tmp_path / "run.toml"
    path.write_text(GOOD.replace("epochs = 0\n", "epochs = 0\npause_lease_s = 30\npause_lease = \"hold\"\n"))
    cfg = TrainConfig.from_toml(path)
    assert (cfg.pause_lease_s, cfg.pause_lease) == (30, "hold")
    assert TrainConfig.from_toml(cfg.to_toml()).pause_lease == "hold"  # recorded in a run folder's run.toml
    assert "pause_lease_s = 30" in cfg.to_toml()
    for mode in LEASE_MODES:  # every mode the attach server takes
        assert TrainConfig.from_dict({"pause_lease": mode}).pause_lease == mode
    for text, message in [
        ("pause_lease_s = 0", "pause_lease_s = 0: expected a number of seconds > 0 (default 120)"),
        ("pause_lease_s = -5.0", "pause_lease_s = -5.0: expected a number of seconds > 0 (default 120)"),
        ("pause_lease_s = inf", "pause_lease_s = inf: expected a number of seconds > 0 (default 120)"),
        ("pause_lease_s = nan", "pause_lease_s = nan: expected a number of seconds > 0 (default 120)"),
        ('pause_lease_s = "2m"', "pause_lease_s = '2m' in top level: expected a number (e.g. 0.001 or 1e-3)"),
        ('pause_lease = "wait"', "pause_lease = 'wait' is not one of resume, hold"),
        ("pause_lease = true", "pause_lease = True in top level: expected a quoted string"),
    ]:
        path.write_text(f"{text}\n{GOOD}")
        with pytest.raises(ValueError) as err:
            TrainConfig.from_toml(path)
        assert str(err.value) == f"{path}: {message}", text
