"""What a script's ``DistributedDataParallel`` wrapper allows the window to change mid-run.

``DistributedDataParallel`` decides at construction which parameters it
averages (those with ``requires_grad`` then), and, unless built with
``find_unused_parameters=True``, expects a gradient for every one of them in
every backward. So in a script that built its own wrapper (its own loop,
Lightning's ``strategy="ddp"``), a freeze from the window would stop every rank
at the next backward ("parameters that were not used in producing the loss"),
and an unfreeze of a parameter frozen when the wrapper was built would train it
on each rank apart (the replicas drift apart, silently). Workbench's own
data-parallel runs rebuild their wrapper after each change; a user's wrapper is
not Workbench's to rebuild, so such a change is refused, with a message that
says how to allow it. The run goes on.

Qt-free. Written here because torch offers no query for "what would this
wrapper accept" (only its constructor's arguments, which it keeps as public
attributes).
"""

from __future__ import annotations

from torch import nn

from workbench.core.model import freezing

__all__ = ["DDPGuard"]


class DDPGuard:
    """Refuse the freezes and unfreezes a ``DistributedDataParallel`` wrapper cannot follow.

    Parameters
    ----------
    wrapper : torch.nn.parallel.DistributedDataParallel
        The script's wrapper; built just before (the parameters trainable now are
        taken as the ones it averages).
    model : nn.Module
        The model it wraps (the one the window's paths name).
    """

    def __init__(self, wrapper: nn.Module, model: nn.Module):
        self.find_unused = bool(getattr(wrapper, "find_unused_parameters", False))
        self.averaged = {id(p) for p in model.parameters() if p.requires_grad}

    def check(self, model: nn.Module, names: list[str], flag: bool) -> None:
        """Raise when setting ``requires_grad = flag`` on ``names`` (module or parameter paths) is not allowed.

        Nothing is changed here (:func:`~workbench.core.model.freezing.would_change`).

        Raises
        ------
        ValueError
            A freeze without ``find_unused_parameters=True``, or an unfreeze of
            parameters the wrapper does not average; the message says what to do.
        UnknownPathError
            A name is not in the model (as the freeze itself would raise).
        """
        changed = freezing.would_change(model, names, flag)
        if not changed:
            return
        if not flag and not self.find_unused:
            raise ValueError(
                "the script's DistributedDataParallel was built without find_unused_parameters=True: with frozen "
                "parameters its next backward would stop every rank. Build it with find_unused_parameters=True "
                "(Lightning: strategy=\"ddp_find_unused_parameters_true\") to freeze mid-run")
        params = dict(model.named_parameters())  # the canonical names would_change reports
        outside = [n for n in changed if flag and id(params[n]) not in self.averaged]
        if outside:
            shown = ", ".join(outside[:3]) + (f" and {len(outside) - 3} more" if len(outside) > 3 else "")
            raise ValueError(
                f"the script's DistributedDataParallel was built while {shown} were frozen: it would not average "
                "their gradients across ranks, and the replicas would drift apart. Start the run with them "
                "trainable (freeze them from the window) to unfreeze them mid-run")
