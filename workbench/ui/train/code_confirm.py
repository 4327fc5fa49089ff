"""Start asks before running code that settings read from a file name (a run.toml's ``file.py:function``).

Settings that arrive with an opened checkpoint (the run.toml beside it) may name
the user's dataset, step, loss or metric code. Showing them is harmless; running
them is not, so the first Start with them asks the trust question of any other
file that names code (``prompts.trust``). A spec typed in the window is the
user's own decision and is never asked about; a registered name (an installed
package's) passes without asking, as everywhere.
"""

from __future__ import annotations

__all__ = ["confirm_file_code"]


def confirm_file_code(settings, config, prompts) -> str | None:
    """Ask (once) to run the file's code that ``config`` names; None = go on, else why the run does not start.

    Parameters
    ----------
    settings : TrainingSettings
        ``code_to_confirm(config)`` and ``confirm_code()``.
    config : TrainConfig
        The settings the run would start with.
    prompts : Prompts
        ``trust(TrustRequired)`` -> bool.
    """
    from workbench.core.errors import TrustRequired
    from workbench.core.train.task.specs import check_trust

    pending = settings.code_to_confirm(config)
    if pending is None:
        return None
    origin, specs = pending
    roles = {}
    try:
        check_trust(config, origin, trust=False)
        asked = []  # every spec is registered
    except TrustRequired as err:
        asked = [spec for spec in err.globals if spec in specs]
        roles = err.roles
    except Exception as exc:  # noqa: BLE001 - a malformed spec: said, nothing run
        return f"Not started: {exc}"
    if asked and not prompts.trust(TrustRequired(origin, asked, kind="code", roles=roles)):
        return (f"Not started: the settings from {origin} name code ({', '.join(asked)}). "
                "Start again and trust it, or type your own spec in the Task and Data sections.")
    settings.confirm_code()
    return None
