"""The user's own datasets (workbench.core.train.data.user_data): a factory file on disk is imported and called,
what it returns is checked with a message that says what to return, and an iterable dataset gets a loader."""

from __future__ import annotations

import textwrap

import pytest
import torch
from torch.utils.data import IterableDataset, TensorDataset

from workbench.core.errors import DataError
from workbench.core.train.data.user_data import IterableLoader, sample_text, user_datasets

FACTORIES = '''
import torch
from torch.utils.data import IterableDataset, TensorDataset


def pair(n=10):
    x = torch.arange(n * 32, dtype=torch.float32).reshape(n, 32)
    return TensorDataset(x, torch.arange(n) % 2), TensorDataset(x[:2], torch.zeros(2, dtype=torch.long))


def as_dict():
    train, val = pair(4)
    return {"train": train, "validation": val, "collate_fn": list}


def with_collate():
    return (*pair(3), list)


class Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.ones(4, 2))


class Counted(Stream):
    def __len__(self):
        return 4


def stream():
    return Stream(), Counted()


def counted():
    return Counted(), Counted()


def empty():
    return TensorDataset(torch.zeros(0, 3)), TensorDataset(torch.zeros(1, 3))


def keys():
    return {"training": None}


def number():
    return 3


def a_list():
    return [1, 2, 3], pair()[1]


def bad_collate():
    return {"train": pair()[0], "val": pair()[1], "collate_fn": "stack"}


def broken(n=1):
    raise KeyError(f"no file {n}")
'''


@pytest.fixture
def factories(tmp_path) -> str:
    (tmp_path / "factories.py").write_text(textwrap.dedent(FACTORIES))
    return str(tmp_path / "factories.py")


def test_a_pair_a_dict_and_a_triple_are_read_with_their_kwargs(factories):
    data = user_datasets(f"{factories}:pair", {"n": 6})
    assert (len(data.train), len(data.val), data.collate_fn) == (6, 2, None)
    x, y = data.train[5]
    assert torch.equal(x, torch.arange(160, 192, dtype=torch.float32)) and y.item() == 1
    named = user_datasets(f"{factories}:as_dict")
    assert (len(named.train), len(named.val), named.collate_fn) == (4, 2, list)  # "validation" read as "val"
    assert user_datasets(f"{factories}:with_collate").collate_fn is list


@pytest.mark.parametrize("factory, message", [
    ("keys", " returned a dict with keys training: return (train, val) or {\"train\": train, \"val\": val}"),
    ("number", " returned int: return (train, val)"),
    ("a_list", ": its train split is a list, not a torch.utils.data.Dataset"),
    ("stream", ": its train split is an IterableDataset without __len__; give it __len__ (samples per epoch)"),
    ("empty", ": the train split is empty"),
    ("bad_collate", ": collate_fn is a str, not a function"),
    ("broken", " raised KeyError: 'no file 1'; fix the factory or its [data] kwargs"),
])
def test_what_a_factory_cannot_return_is_said_with_its_name(factories, factory, message):
    spec = f"{factories}:{factory}"
    with pytest.raises(DataError) as err:
        user_datasets(spec)
    assert str(err.value).startswith(f"data.dataset {spec!r}{message}")


def test_a_factory_that_cannot_be_found_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="^data.dataset: "):
        user_datasets(f"{tmp_path / 'missing.py'}:make")


def test_the_first_sample_is_described_for_messages():
    text = sample_text(TensorDataset(torch.zeros(3, 32), torch.zeros(3, dtype=torch.long)))
    assert "32" in text and "int64" in text
    assert sample_text(TensorDataset(torch.zeros(0, 2))) == ""  # unreadable: no sample

    class Stream(IterableDataset):
        def __iter__(self):
            raise AssertionError("never iterated for a description")

    assert sample_text(Stream()) == ""


class Numbers(IterableDataset):
    """0..9 shifted by 100 per epoch, as a seeded dataset with ``set_epoch`` would."""

    def __init__(self):
        self.epoch = 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        return iter(range(100 * self.epoch, 100 * self.epoch + 10))

    def __len__(self):
        return 10


def test_an_iterable_loader_counts_batches_and_resumes_by_drawing_them_again():
    loader = IterableLoader(Numbers(), batch_size=4)
    assert len(loader) == 3
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [b.tolist() for b in loader.iter_epoch(2, start_batch=1)] == [[204, 205, 206, 207], [208, 209]]
    assert loader.epoch == 2 and loader.dataset.epoch == 2
    assert list(loader.iter_epoch(1, start_batch=5)) == []
    dropping = IterableLoader(Numbers(), batch_size=4, drop_last=True, collate_fn=list)
    assert len(dropping) == 2 and list(dropping) == [[0, 1, 2, 3], [4, 5, 6, 7]]


SPAWNED = '''
import torch
from torch.utils.data import Dataset


class Squares(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([float(i * i)]), i % 2


def pairs(batch):
    return torch.stack([x for x, _ in batch]), torch.tensor([y for _, y in batch])


def make():
    return Squares(), Squares()
'''


def test_a_dataset_defined_in_a_file_loads_in_spawned_dataloader_workers(tmp_path):
    """A spawned worker cannot import ``_workbench_factory_<hash>`` by name: the portable dataset imports the file."""
    from torch.utils.data import DataLoader

    from workbench.core.train.data.user_data import portable_dataset

    (tmp_path / "spawned_data.py").write_text(SPAWNED)
    data = user_datasets(f"{tmp_path / 'spawned_data.py'}:make")
    module = type(data.train).__module__
    assert module.startswith("_workbench_factory_")
    collate = __import__("sys").modules[module].pairs  # a function of the file, pickled after the dataset
    loader = DataLoader(portable_dataset(data.train), batch_size=4, num_workers=2, multiprocessing_context="spawn",
                        collate_fn=collate)
    batches = list(loader)
    assert torch.equal(torch.cat([x for x, _ in batches]).flatten(), torch.arange(8.0) ** 2)
    assert len(portable_dataset(data.train)) == 8 and portable_dataset(data.train)[3][0].item() == 9.0
