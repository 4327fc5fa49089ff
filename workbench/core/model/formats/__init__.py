"""Every file format Workbench reads: one module per format, asked in turn (as Netron's ``ModelFactoryService``).

Each format is a module (or, contributed, any object) with two functions:

* ``match(path, head) -> bool``: cheap, by content first (``head``: the file's
  first bytes, a :class:`~workbench.core.model.formats.sniff.Sniff` that also
  knows a zip's record names), suffix second; never reads the file again;
* ``read(path, *, trust, head) -> Checkpoint``: the file's tensors and what it
  says about itself. A format reads and never builds a model (an import-linter
  contract keeps ``opening`` and the architecture modules out of this package):
  a file that names its model says so as plain data in ``metadata.arch``.

The built-in formats (:data:`BUILTIN_FORMATS`): model folders
(:mod:`.model_folder`: Hugging Face ``save_pretrained``, timm hub), safetensors
with its sharded index (:mod:`.safetensors`), TorchScript (:mod:`.torchscript`)
and ``torch.save`` zip / legacy pickle (:mod:`.torch_pickle`: state_dict,
training dict, Lightning ``.ckpt``, pickled module). Then the formats installed
packages contribute (entry-point group ``workbench.formats``, through
:mod:`workbench.core.contrib` like every contribution kind: installing a
package is the user's decision, so its formats resolve without asking; a
contributed format's ``read`` still gets ``trust`` and must refuse to run a
file's code without it). Qt-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.core import contrib
from workbench.core.errors import CheckpointError
from workbench.core.files import remove_stale_temps
from workbench.core.model.checkpoint import Checkpoint
from workbench.core.model.formats import model_folder, safetensors, torch_pickle, torchscript
from workbench.core.model.formats.sniff import Sniff, sniff

__all__ = ["BUILTIN_FORMATS", "find_format", "read_checkpoint", "contributed_formats"]

#: The built-in formats, asked in this order.
BUILTIN_FORMATS = (model_folder, safetensors, torchscript, torch_pickle)


def contributed_formats() -> list[Any]:
    """The formats installed packages register (group ``workbench.formats``), imported now, by name.

    Raises
    ------
    ContributionError
        A contributed format cannot be imported or has no ``match`` / ``read``.
    """
    return [contrib.resolve("format", name) for name in contrib.names("format")]


def find_format(path: str | Path, head: Sniff | None = None) -> tuple[Any, Sniff]:
    """The first format whose ``match`` accepts ``path``: the built-ins, then contributed ones.

    Parameters
    ----------
    path : str or Path
    head : Sniff, optional
        A sniff already made (else :func:`~workbench.core.model.formats.sniff.sniff` reads the first bytes).

    Returns
    -------
    (format, Sniff)

    Raises
    ------
    CheckpointError
        Missing, empty or unreadable file, damaged zip, or no format matches.
    """
    path = Path(path)
    if model_folder.match(path, b""):  # a folder, or a file inside one: nothing of the file is read
        return model_folder, head if head is not None else Sniff(path, is_dir=path.is_dir())
    head = head if head is not None else sniff(path)
    if head.is_dir:
        raise CheckpointError("is a directory, not a checkpoint file (nor a model folder with config.json). "
                              "Choose the .pt/.pth/.ckpt/.safetensors file inside it.", path)
    for fmt in BUILTIN_FORMATS[1:]:
        if fmt.match(path, head):
            return fmt, head
    for fmt in contributed_formats():
        if fmt.match(path, bytes(head)):
            return fmt, head
    raise CheckpointError(
        "is not a PyTorch checkpoint: it is neither a torch.save zip archive, a legacy "
        "pickle nor a safetensors file. Choose a .pt/.pth/.ckpt/.bin/.safetensors file.",
        path,
    )


def read_checkpoint(path: str | Path, *, trust: bool = False, mmap: bool = True,
                    head: Sniff | None = None) -> Checkpoint:
    """Read any supported checkpoint file or model folder to CPU: sniff once, read once.

    Parameters
    ----------
    path : str or Path
        A file (its format found from its content, never its suffix) or a model folder.
    trust : bool
        Allow loading that runs code from the file: full pickles (``weights_only=False``)
        and TorchScript (``torch.jit.load``). Default False.
    mmap : bool
        Memory-map zip archives (``torch.load(mmap=True)``): a 1 GB file opens in
        milliseconds and pages are read on first use. Default True.
    head : Sniff, optional
        The sniff of an earlier read (``TrustRequired.sniff``): the file is not sniffed again.

    Returns
    -------
    Checkpoint
        Its ``state_dict`` keys keep their prefixes
        (:func:`~workbench.core.model.prefixes.strip_prefixes`). ``metadata.verified``
        says whether a stored digest was checked. Opening also removes the
        temporary files interrupted saves left in the file's folder
        (:func:`workbench.core.files.remove_stale_temps`).

    Raises
    ------
    TrustRequired
        The file is TorchScript, a pickle needing globals that weights-only loading
        refuses (listed in ``.globals``), or a model folder with custom code, and
        ``trust`` is False. Nothing from the file ran. ``.sniff`` holds the sniff
        (pass it back as ``head``) when there is one.
    CheckpointCorrupt
        The file carries a digest of its tensors and a tensor no longer matches it;
        the message names the newest intact checkpoint of the folder.
    CheckpointError
        Missing, empty, truncated, damaged or unrecognised file; a dict without a
        state_dict; a safetensors header that fails validation.
    """
    path = Path(path)
    fmt, head = find_format(path, head)
    if not head.is_dir:
        remove_stale_temps(path.parent)
    if fmt is torch_pickle:
        return torch_pickle.read(path, trust=trust, head=head, mmap=mmap)
    return fmt.read(path, trust=trust, head=head)
