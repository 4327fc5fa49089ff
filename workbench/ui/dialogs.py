"""Dialogs of the main window: architecture choice, trust, load report, new model, LoRA adapters.

Each dialog is a plain widget that tests can build and inspect without
``exec()``; the window calls them through overridable ``_ask_*`` methods.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDoubleSpinBox,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from workbench.core.model.spec import ArchSpec

#: Returned by :meth:`ArchitectureDialog.chosen` for "show the weights without an architecture".
WEIGHTS_ONLY = "weights_only"
#: A detected candidate "fits" from this match score on (the same bar as ``workbench inspect``);
#: below it the Architecture dialog makes "Weights only" its default button.
FIT_THRESHOLD = 0.9
SPEC_ROLE = Qt.ItemDataRole.UserRole.value


def _spec_label(spec: ArchSpec) -> str:
    args = ", ".join(f"{k}={v}" for k, v in spec.kwargs.items())
    return f"{spec.name}({args})" if args else spec.name


class _SearchableList(QWidget):
    """A search box over a ``QListWidget``; hides rows whose text does not contain the search.

    Signals
    -------
    activated()
        A row was double-clicked: the dialog accepts it (Enter still presses the default button).
    """

    activated = Signal()

    def __init__(self, list_name: str, parent=None):
        super().__init__(parent)
        self.search = QLineEdit(placeholderText="Search architectures…", clearButtonEnabled=True)
        self.list = QListWidget(objectName=list_name)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.search)
        layout.addWidget(self.list)
        self.search.textChanged.connect(self._on_search_changed)
        self.list.itemDoubleClicked.connect(self._on_item_activated)

    def _on_item_activated(self, _item: QListWidgetItem) -> None:
        self.activated.emit()

    def add(self, text: str, spec: ArchSpec, tooltip: str = "") -> QListWidgetItem:
        item = QListWidgetItem(text)
        item.setData(SPEC_ROLE, spec)
        item.setToolTip(tooltip)
        self.list.addItem(item)
        return item

    def current_spec(self) -> ArchSpec | None:
        item = self.list.currentItem()
        return None if item is None or item.isHidden() else item.data(SPEC_ROLE)

    def _on_search_changed(self, text: str) -> None:
        needle = text.strip().lower()
        first = None
        for row in range(self.list.count()):
            item = self.list.item(row)
            item.setHidden(bool(needle) and needle not in item.text().lower())
            if first is None and not item.isHidden():
                first = item
        if first is not None and (self.list.currentItem() is None or self.list.currentItem().isHidden()):
            self.list.setCurrentItem(first)


class ArchitectureDialog(QDialog):
    """Choose what module a bare state_dict loads into (objectName ``archDialog``, list ``archList``).

    Rows: the core's detected candidates, best first with their match score, then
    every architecture from ``core.model.meta_build.list_architectures()``. A factory
    spec can be typed in instead; "Weights only" shows the tensors without an
    architecture. When no candidate reaches :data:`FIT_THRESHOLD` the dialog says
    so and "Weights only" is the default button (Enter), so a file nothing fits
    opens in the weights-only view instead of failing to load into a guess.
    A double-click on a row accepts it.
    """

    def __init__(self, candidates: list, architectures: list[str], file_name: str = "", parent=None):
        super().__init__(parent, objectName="archDialog")
        self.setWindowTitle("Choose the architecture")
        self._weights_only = False
        self.fits = bool(candidates) and candidates[0].score >= FIT_THRESHOLD
        text = (f"{file_name or 'This file'} holds weights without a model class. "
                "Pick the architecture they belong to (best matches first), or type a factory spec.")
        if not self.fits:
            text += ("\n\nNo known architecture fits these weights. \"Weights only\" shows the tensors "
                     "as they are (no forward pass, no training).")
        intro = QLabel(text, wordWrap=True, objectName="archIntro")
        self.choices = _SearchableList("archList", self)
        self.choices.activated.connect(self.accept)
        self._fill(candidates, architectures)
        self.spec_edit = QLineEdit(placeholderText="pkg.module:factory  or  path/to/file.py:factory",
                                   objectName="archSpecEdit")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.weights_only_button = buttons.addButton("Weights only", QDialogButtonBox.ButtonRole.ActionRole)
        self.weights_only_button.clicked.connect(self._on_weights_only_clicked)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        form = QFormLayout()
        form.addRow("Factory spec:", self.spec_edit)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.choices)
        layout.addLayout(form)
        layout.addWidget(buttons)
        (self.ok_button if self.fits else self.weights_only_button).setDefault(True)  # once in the dialog
        self.resize(520, 560)

    def _fill(self, candidates: list, architectures: list[str]) -> None:
        seen = set()
        for cand in candidates:
            item = self.choices.add(f"{_spec_label(cand.spec)}    match {cand.score:.0%}", cand.spec,
                                    "Detected from the state_dict's keys and shapes")
            font = item.font()
            font.setBold(True)
            item.setFont(font)
            seen.add(cand.spec.name)
        for name in architectures:
            if name not in seen:
                self.choices.add(name, ArchSpec(name))
        if self.choices.list.count():
            self.choices.list.setCurrentRow(0)

    def _on_weights_only_clicked(self) -> None:
        self._weights_only = True
        self.accept()

    def chosen(self) -> ArchSpec | str | None:
        """The choice after the dialog closed: an ``ArchSpec``, :data:`WEIGHTS_ONLY`, or None."""
        if self._weights_only:
            return WEIGHTS_ONLY
        if self.result() != QDialog.DialogCode.Accepted:
            return None
        typed = self.spec_edit.text().strip()
        return ArchSpec.parse(typed) if typed else self.choices.current_spec()


class NewModelDialog(QDialog):
    """File > New from architecture: a searchable list of every architecture and a ``num_classes`` field."""

    def __init__(self, architectures: list[str], parent=None):
        super().__init__(parent, objectName="newModelDialog")
        self.setWindowTitle("New from architecture")
        self.choices = _SearchableList("newArchList", self)
        self.choices.activated.connect(self.accept)
        for name in architectures:
            self.choices.add(name, ArchSpec(name))
        if self.choices.list.count():
            self.choices.list.setCurrentRow(0)
        self.use_classes = QCheckBox("Set num_classes", checked=True)
        self.num_classes = QSpinBox(minimum=1, maximum=100_000, value=10, objectName="numClassesSpin")
        self.use_classes.toggled.connect(self.num_classes.setEnabled)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        form = QFormLayout()
        form.addRow(self.use_classes, self.num_classes)
        layout = QVBoxLayout(self)
        layout.addWidget(self.choices)
        layout.addLayout(form)
        layout.addWidget(buttons)
        self.resize(420, 520)

    def chosen(self) -> ArchSpec | None:
        """The ``ArchSpec`` to build (with ``num_classes`` when ticked), or None."""
        if self.result() != QDialog.DialogCode.Accepted:
            return None
        spec = self.choices.current_spec()
        if spec is None:
            return None
        kwargs = {"num_classes": self.num_classes.value()} if self.use_classes.isChecked() else {}
        return ArchSpec(spec.name, kwargs)


@dataclass(frozen=True)
class LoraOptions:
    """What the LoRA dialog asks: rank ``r``, ``alpha`` (the update is scaled by alpha / r), ``dropout``,
    the module ``types`` to adapt below the selection, and optional last ``names`` to keep (``("query", "value")``).
    """

    r: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    types: tuple[str, ...] = ("Linear",)
    names: tuple[str, ...] = ()


class LoraDialog(QDialog):
    """"Add LoRA adapters…" (objectName ``loraDialog``): rank, alpha, dropout, target types, names.

    Widgets: ``loraRankSpin``, ``loraAlphaSpin``, ``loraDropoutSpin``, one
    ``loraType<Name>`` check box per type, ``loraNamesEdit``.

    Parameters
    ----------
    target : str
        The selected module's qualified name (shown in the text).
    types : tuple of str
        The types offered (``core.model.lora.LORA_TYPES``).
    present : collection of str
        The types found under the selection: these start ticked, the others disabled.
    """

    def __init__(self, target: str, types: tuple[str, ...], present, parent=None):
        super().__init__(parent, objectName="loraDialog")
        self.setWindowTitle("Add LoRA adapters")
        intro = QLabel(f"Freeze {target or 'the model'}'s weights and train low-rank adapters instead: each chosen "
                       "layer computes with W + (alpha / r) B A (Hu et al., 2021). Undo removes them.",
                       wordWrap=True, objectName="loraIntro")
        self.rank = QSpinBox(minimum=1, maximum=4096, value=8, objectName="loraRankSpin")
        self.alpha = QDoubleSpinBox(minimum=0.01, maximum=1e6, value=16.0, decimals=2, objectName="loraAlphaSpin")
        self.dropout = QDoubleSpinBox(minimum=0.0, maximum=0.99, value=0.0, decimals=2, singleStep=0.05,
                                      objectName="loraDropoutSpin")
        self.type_boxes = {t: QCheckBox(t, objectName=f"loraType{t}", checked=t in present, enabled=t in present)
                           for t in types}
        self.names = QLineEdit(placeholderText="optional: query, value", objectName="loraNamesEdit")
        self.names.setToolTip("Adapt only modules whose last name is one of these (comma-separated)")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        for box in self.type_boxes.values():
            box.toggled.connect(self._on_types_toggled)
        self._on_types_toggled()
        self._build_layout(intro, buttons)

    def _build_layout(self, intro: QLabel, buttons: QDialogButtonBox) -> None:
        form = QFormLayout()
        form.addRow("Rank r:", self.rank)
        form.addRow("Alpha:", self.alpha)
        form.addRow("Dropout:", self.dropout)
        for i, box in enumerate(self.type_boxes.values()):
            form.addRow("Adapt:" if i == 0 else "", box)
        form.addRow("Only names:", self.names)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(buttons)

    def _on_types_toggled(self, _checked: bool = False) -> None:
        self.ok_button.setEnabled(any(b.isChecked() for b in self.type_boxes.values()))

    def options(self) -> LoraOptions | None:
        """The choice after the dialog closed, or None when cancelled."""
        if self.result() != QDialog.DialogCode.Accepted:
            return None
        names = tuple(n.strip() for n in self.names.text().replace(";", ",").split(",") if n.strip())
        return LoraOptions(r=self.rank.value(), alpha=self.alpha.value(), dropout=self.dropout.value(),
                           types=tuple(t for t, b in self.type_boxes.items() if b.isChecked()), names=names)


def ask_lora(target: str, types: tuple[str, ...], present, parent=None) -> LoraOptions | None:
    """Show :class:`LoraDialog` modally; the options chosen, or None."""
    dialog = LoraDialog(target, types, present, parent)
    dialog.exec()
    options = dialog.options()
    dialog.deleteLater()
    return options


#: How the trust question names what a file's code spec is for (``TrustRequired.roles``' values).
ROLE_WORDS = {"architecture": "architecture", "dataset": "dataset", "step": "training step", "loss": "loss",
              "metric": "metric", "task": "task"}
#: Code specs listed in the trust question at most (the rest: "… and N more").
MAX_LISTED = 40


def trust_dialog(err, parent=None) -> QMessageBox:
    """A warning listing the code a file would run; Cancel is the default and Escape button.

    For a file that names code (``kind="code"``) the first line says what the code is for
    (its architecture, dataset, training step, loss, metric: ``err.roles``), and the
    list below gives each spec with the file it would import.

    Parameters
    ----------
    err : core.errors.TrustRequired
        With ``.path``, ``.globals``, ``.kind`` (``"pickle"``, ``"torchscript"``
        or ``"code"``: an architecture / factory spec the file names) and ``.roles``.
    """
    box = _warning_box(parent, "trustDialog", "Loading this file runs code")
    kind = getattr(err, "kind", "")
    names = list(getattr(err, "globals", []) or [])
    path = getattr(err, "path", None)
    where = Path(str(path)).name if path else "This file"
    if kind == "code":
        roles = dict(getattr(err, "roles", None) or {})
        words = list(dict.fromkeys(ROLE_WORDS.get(roles[n], roles[n]) for n in names if n in roles))
        if words == ["architecture"]:
            what = "to build its model (its architecture)"
        elif words:
            what = "for its " + _and_list(words)
        else:
            what = "to build its model"
        box.setText(f"{where} names Python code {what}. Going on imports that code and calls it, which can do "
                    "anything your account can. Only continue if you trust where the file comes from.")
        lines = [_code_line(n, roles.get(n), path) for n in names[:MAX_LISTED]]
        heading = "Code it names"
    else:
        what = "a TorchScript program" if kind == "torchscript" else "pickled Python objects"
        box.setText(f"{where} contains {what}. Loading it imports and runs that code. "
                    "Only continue if you trust where the file comes from.")
        lines = names[:MAX_LISTED]
        heading = "Globals it imports"
    listing = "\n".join(lines) + (f"\n… and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")
    file_line = f"File: {path}\n\n" if path else ""
    box.setInformativeText(f"{file_line}{heading}:\n{listing}" if names else f"{file_line}{err}")
    _add_accept_and_default_cancel(box, "Trust and load", "trustButton")
    return box


def _and_list(words: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _code_line(spec: str, role: str | None, origin) -> str:
    """``dataset: my_data.py:load (/runs/r/my_data.py)``: what a spec is for and what it would import."""
    target, sep, _ = spec.rpartition(":")
    if not sep or not target:
        where = ""
    elif target.endswith(".py") or "/" in target or "\\" in target:
        file = Path(target).expanduser()
        if not file.is_absolute() and origin:
            file = Path(str(origin)).expanduser().parent / file
        where = f" ({file})"
    else:
        where = f" (module {target})"
    label = f"{ROLE_WORDS.get(role, role)}: " if role else ""
    return f"{label}{spec}{where}"


def corrupt_checkpoint_dialog(err, parent=None) -> QMessageBox:
    """A corrupt checkpoint (digest mismatch) and the offer to open the newest intact one; Cancel is the default.

    Parameters
    ----------
    err : core.errors.CheckpointCorrupt
        With ``.path`` and ``.intact`` (not None: the caller shows an error otherwise).
    """
    box = _warning_box(parent, "corruptCheckpointDialog", "The checkpoint is corrupt")
    box.setText(f"{err}")
    box.setInformativeText(f"Open {err.intact} instead? It verifies against the digest stored in it.")
    _add_accept_and_default_cancel(box, f"Open {Path(err.intact).name}", "openIntactButton")
    return box


#: Tensor names the Partial-load question lists in its text at most; "Show details" has them all.
LISTED_KEYS = 4


def load_report_dialog(report, file_name: str, arch_name: str, parent=None, spec_text: str = "") -> QMessageBox:
    """Missing / unexpected / mismatched keys, with "Partial load" and Cancel (default).

    The text names the architecture by its short name and lists the first
    :data:`LISTED_KEYS` missing (and mismatched) tensors; "Show details" has the whole
    report and the full architecture spec.

    Parameters
    ----------
    report : core.model.loading.LoadReport
    file_name : str
        The file opened (its name is shown).
    arch_name : str
        The architecture's short name (:func:`workbench.core.model.spec.short_name`).
    spec_text : str, optional
        The architecture in full (``str(ArchSpec)``), for the details.
    """
    box = _warning_box(parent, "loadReportDialog", "The weights do not fit the architecture")
    counts = [f"{len(items)} {word}" for items, word in ((report.missing, "missing"),
                                                         (report.unexpected, "unexpected"),
                                                         (report.mismatched, "of another shape")) if items]
    box.setText(f"{Path(file_name).name} does not load cleanly into {arch_name}: "
                f"{', '.join(counts) or 'nothing differs'}.\n"
                "A partial load copies every tensor that fits and leaves the rest freshly initialized.")
    lines = []
    if report.missing:
        lines.append("Missing: " + _first(report.missing))
    if report.mismatched:
        lines.append("Of another shape: " + _first([name for name, _exp, _found in report.mismatched]))
    if report.unexpected and not lines:
        lines.append("Not in the model: " + _first(report.unexpected))
    box.setInformativeText("\n".join(lines))
    details = format_report(report)
    if spec_text and spec_text != arch_name:
        details = f"Architecture: {spec_text}\n\n{details}"
    box.setDetailedText(details)
    _add_accept_and_default_cancel(box, "Partial load", "partialLoadButton")
    return box


def _first(names: list[str]) -> str:
    """The first :data:`LISTED_KEYS` names, and how many more."""
    shown = ", ".join(names[:LISTED_KEYS])
    return shown + (f" … and {len(names) - LISTED_KEYS} more (Show details)" if len(names) > LISTED_KEYS else "")


def _warning_box(parent, object_name: str, title: str) -> QMessageBox:
    box = QMessageBox(parent)
    box.setObjectName(object_name)
    box.setIcon(QMessageBox.Icon.Warning)
    box.setWindowTitle(title)
    return box


def _add_accept_and_default_cancel(box: QMessageBox, label: str, object_name: str) -> None:
    """An accept button named ``object_name``, and Cancel as the default and Escape button."""
    accept = box.addButton(label, QMessageBox.ButtonRole.AcceptRole)
    accept.setObjectName(object_name)
    cancel = box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(cancel)
    box.setEscapeButton(cancel)


def format_report(report) -> str:
    """A ``LoadReport`` as plain text, one key per line."""
    lines = []
    if report.stripped_prefixes:
        lines.append("Stripped prefixes: " + ", ".join(report.stripped_prefixes))
    for title, items in (("Missing", report.missing), ("Unexpected", report.unexpected)):
        if items:
            lines += [f"{title} ({len(items)}):"] + [f"  {k}" for k in items]
    if report.mismatched:
        lines.append(f"Mismatched shapes ({len(report.mismatched)}):")
        lines += [f"  {name}: expected {tuple(exp)}, found {tuple(found)}" for name, exp, found in report.mismatched]
    return "\n".join(lines)


def accepted_button(box: QMessageBox) -> bool:
    """True when ``box`` was closed with its AcceptRole button."""
    clicked = box.clickedButton()
    return clicked is not None and box.buttonRole(clicked) == QMessageBox.ButtonRole.AcceptRole


__all__ = ["WEIGHTS_ONLY", "FIT_THRESHOLD", "ArchitectureDialog", "NewModelDialog", "LoraOptions", "LoraDialog",
           "ask_lora", "trust_dialog", "corrupt_checkpoint_dialog", "load_report_dialog",
           "format_report", "accepted_button"]
