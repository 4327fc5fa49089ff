"""Where the application keeps its ``QSettings``.

With ``WORKBENCH_SETTINGS_DIR`` set (the tests set it), settings go to an INI
file in that folder and never touch the user's own settings.
"""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QSettings

ORGANIZATION = "Workbench"
APPLICATION = "Workbench"


def set_application_names() -> None:
    """Set the organization / application names ``QSettings()`` uses."""
    QCoreApplication.setOrganizationName(ORGANIZATION)
    QCoreApplication.setApplicationName(APPLICATION)


def make_settings() -> QSettings:
    """The application's settings: ``$WORKBENCH_SETTINGS_DIR/workbench.ini`` when set, else the platform store."""
    folder = os.environ.get("WORKBENCH_SETTINGS_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        return QSettings(str(Path(folder) / "workbench.ini"), QSettings.Format.IniFormat)
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, ORGANIZATION, APPLICATION)
