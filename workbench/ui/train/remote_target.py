"""Training › Run options › "Run on: This machine | HOST…": where Start trains, and Start on a host.

:class:`RunTarget` is the combo (objectName ``runOnCombo``) and, for a host, its fields: the folder of runs
there, "SLURM cluster" and the job's nodes, GPUs per node, partition and time limit (shown when ticked). Hosts
are remembered with QSettings (:mod:`workbench.ui.remote_hosts`); "Add host…" asks for an ssh destination.

:func:`submit_from_window` is Start with a host chosen: the run file is written as a local run's would be (the
model's weights, frozen set and architecture as ``init.pt``, its edits replayed before them), the trust question
was asked by Start as for a local run, and :func:`workbench.remote.submit` copies and starts it off the GUI
thread behind a busy line. A refusal or an ssh failure is one line (``prompts.error``); nothing is left behind
here, and the host keeps no run folder of a run that did not start.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QFormLayout, QInputDialog, QLabel, QLineEdit, QPushButton, QSpinBox, QWidget,
)

from workbench.core.remote.jobs import DEFAULT_REMOTE_DIR
from workbench.ui.remote_hosts import (HostEntry, destination_problem, load_hosts, one_line, remember_host,
                                       save_hosts)
from workbench.ui.threading import run_in_background

__all__ = ["RunTarget", "submit_from_window", "ADD_HOST", "SUBMITTED_MS"]

#: The combo's last item: ask for a new host.
ADD_HOST = "add-host"
#: How long the status bar says where a submitted run is and how to watch it, ms.
SUBMITTED_MS = 30_000
#: Most nodes / GPUs per node the fields offer (a cluster says its own limits when sbatch refuses).
MAX_NODES, MAX_GPUS = 4096, 64


class RunTarget(QWidget):
    """Where the next Start trains: this machine, or a remembered host.

    Parameters
    ----------
    qsettings : QSettings
        Where hosts are remembered.

    Attributes
    ----------
    combo : QComboBox
        ``runOnCombo``: "This machine", each host, "Add host…".
    remote_dir_edit : QLineEdit
        ``remoteDirEdit``: the folder of runs on the host.
    slurm_check : QCheckBox
        ``slurmCheck``: the host is a SLURM login node.
    nodes_spin, gpus_spin : QSpinBox
        ``slurmNodesSpin``, ``slurmGpusSpin`` (0: no ``--gpus-per-node``).
    partition_edit, time_edit : QLineEdit
        ``slurmPartitionEdit``, ``slurmTimeEdit``.
    ask_host : callable
        ``ask_host() -> str or None``: the ssh destination to add (a dialog; tests replace it).

    Signals
    -------
    targetChanged(str)
        The host chosen (``""``: this machine).
    """

    targetChanged = Signal(str)

    def __init__(self, qsettings, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("runTarget")
        self._qsettings = qsettings
        self.ask_host = self._ask_host
        self.combo = QComboBox(objectName="runOnCombo")
        self.combo.setToolTip("Where Start trains: this machine, or a host reached with your own ssh "
                              "(an alias of ~/.ssh/config, user@server)")
        self.note = QLabel("", objectName="runTargetNote", wordWrap=True)
        self.note.setEnabled(False)  # drawn as a hint
        self.remote_dir_edit = QLineEdit(objectName="remoteDirEdit", placeholderText=DEFAULT_REMOTE_DIR)
        self.remote_dir_edit.setToolTip("The folder of runs on the host (each run gets a folder in it)")
        self.slurm_check = QCheckBox("SLURM cluster (submit with sbatch)", objectName="slurmCheck")
        self.nodes_spin = _spin("slurmNodesSpin", 1, MAX_NODES, "")
        self.gpus_spin = _spin("slurmGpusSpin", 0, MAX_GPUS, "none")
        self.partition_edit = QLineEdit(objectName="slurmPartitionEdit", placeholderText="the cluster's default")
        self.time_edit = QLineEdit(objectName="slurmTimeEdit", placeholderText="HH:MM:SS (the default)")
        self.forget_button = QPushButton("Forget host", objectName="forgetHostButton")
        self.forget_button.setToolTip("Remove this host from the list (nothing on the host changes)")
        self.host_box, self.slurm_box = QWidget(objectName="hostFields"), QWidget(objectName="slurmFields")
        slurm_form = _form(self.slurm_box)
        slurm_form.addRow("Nodes:", self.nodes_spin)
        slurm_form.addRow("GPUs per node:", self.gpus_spin)
        slurm_form.addRow("Partition:", self.partition_edit)
        slurm_form.addRow("Time limit:", self.time_edit)
        host_form = _form(self.host_box)
        host_form.addRow("Runs folder:", self.remote_dir_edit)
        host_form.addRow(self.slurm_check)
        host_form.addRow(self.slurm_box)
        host_form.addRow(self.forget_button)
        form = _form(self)
        form.addRow("Run on:", self.combo)
        form.addRow(self.note)
        form.addRow(self.host_box)
        self._fill(None)
        self.combo.activated.connect(self._on_activated)
        self.slurm_check.toggled.connect(self._on_edited)
        for spin in (self.nodes_spin, self.gpus_spin):
            spin.valueChanged.connect(self._on_edited)
        for edit in (self.remote_dir_edit, self.partition_edit, self.time_edit):
            edit.editingFinished.connect(self._on_edited)
        self.forget_button.clicked.connect(self.forget_host)

    # -- what Start reads ----------------------------------------------------------------
    def entry(self) -> HostEntry | None:
        """The host chosen with its fields, or None for this machine."""
        host = self.combo.currentData()
        if not host or host == ADD_HOST:
            return None
        return HostEntry(host, self.slurm_check.isChecked(), self.nodes_spin.value(), self.gpus_spin.value(),
                         self.partition_edit.text().strip(), self.time_edit.text().strip(),
                         self.remote_dir_edit.text().strip())

    def hosts(self) -> list[str]:
        """The remembered hosts, as listed."""
        return [h.host for h in load_hosts(self._qsettings)]

    # -- choosing ------------------------------------------------------------------------
    def choose(self, host: str | None) -> None:
        """Show ``host`` (remembered) as the target, or this machine (None / ``""``)."""
        self._fill(host or None)
        self.targetChanged.emit(host or "")

    def add_host(self, host: str) -> bool:
        """Remember ``host`` and choose it; False (the note says why) when it is no ssh destination."""
        host = host.strip()
        problem = destination_problem(host)
        if problem is not None:
            self.note.setText(problem)
            return False
        if host not in self.hosts():
            remember_host(self._qsettings, HostEntry(host))
        self.choose(host)
        return True

    def forget_host(self) -> None:
        """Forget the host chosen; this machine is chosen again."""
        entry = self.entry()
        if entry is not None:
            save_hosts(self._qsettings, [h for h in load_hosts(self._qsettings) if h.host != entry.host])
        self.choose(None)

    def _ask_host(self) -> str | None:
        text, ok = QInputDialog.getText(self, "Add host", "ssh destination (an alias of ~/.ssh/config, or "
                                        "user@server):")
        return text if ok else None

    def _on_activated(self, index: int) -> None:
        data = self.combo.itemData(index)
        if data == ADD_HOST:
            previous = self._chosen
            text = self.ask_host()
            if not text or not self.add_host(text):
                self._fill(previous, keep_note=True)
            return
        self.choose(data)

    def _on_edited(self, *_args) -> None:
        self.slurm_box.setVisible(self.slurm_check.isChecked())
        entry = self.entry()
        if entry is not None and not self._filling:
            remember_host(self._qsettings, entry)

    def _fill(self, host: str | None, keep_note: bool = False) -> None:
        """List the hosts, select ``host`` (None: this machine) and show its remembered fields."""
        self._filling = True
        try:
            hosts = load_hosts(self._qsettings)
            entry = next((h for h in hosts if h.host == host), None)
            self.combo.clear()
            self.combo.addItem("This machine", "")
            for h in hosts:
                self.combo.addItem(h.host + (" (SLURM)" if h.slurm else ""), h.host)
            self.combo.addItem("Add host…", ADD_HOST)
            self.combo.setCurrentIndex(self.combo.findData(entry.host) if entry else 0)
            self._chosen = entry.host if entry else None
            if entry is not None:
                self.remote_dir_edit.setText(entry.remote_dir)
                self.slurm_check.setChecked(entry.slurm)
                self.nodes_spin.setValue(entry.nodes)
                self.gpus_spin.setValue(entry.gpus_per_node)
                self.partition_edit.setText(entry.partition)
                self.time_edit.setText(entry.time)
            self.host_box.setVisible(entry is not None)
            self.slurm_box.setVisible(entry is not None and entry.slurm)
            if not keep_note:
                self.note.setText(f"Start copies the run to {entry.host} and starts it there; the Runs dock lists "
                                  "it under On hosts" if entry else "")
            self.note.setVisible(bool(self.note.text()))
        finally:
            self._filling = False


def _spin(name: str, low: int, high: int, special: str) -> QSpinBox:
    spin = QSpinBox(objectName=name)
    spin.setRange(low, high)
    if special:
        spin.setSpecialValueText(special)
    return spin


def _form(widget: QWidget) -> QFormLayout:
    form = QFormLayout(widget)
    form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
    form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
    form.setContentsMargins(0, 0, 0, 0)
    return form


def submit_from_window(panel, config, entry: HostEntry):
    """Start ``config`` (the form's settings, filled as for a local Start) on ``entry``'s host.

    Parameters
    ----------
    panel : TrainingPanel
        ``session`` (the model, its architecture), ``prompts.error``, the status line.
    config : TrainConfig
        Filled by the panel (model source, edits); Start has asked the trust question already.
    entry : HostEntry

    Returns
    -------
    RemoteRun or None
        The submitted run; None after one line said why not (nothing is left here, nor on the host).
    """
    from workbench.core.model.saving import checkpoint_payload
    from workbench.core.train.trainer.run_record import record_model

    session = panel.session
    mc = config.model
    arch = record_model(mc, session.model, session.arch_spec)  # as a local run records its model
    fresh = not mc.resume  # a fresh run starts from the window's weights, as a local run's init.pt records them
    if fresh:
        mc.init, mc.source, mc.checkpoint = "init.pt", mc.source or mc.checkpoint, ""
    model = session.model
    slug = Path(config.run_dir).name if config.run_dir else (mc.arch.rpartition(":")[2] or "run")
    options = entry.submit_options()

    def work():
        from workbench.core.errors import TrustRequired
        from workbench.core.model.saving import save_checkpoint
        from workbench.core.train.launch.headless import check_run_trust
        from workbench.remote import submit

        stage = Path(tempfile.mkdtemp(prefix="workbench-submit-"))
        try:
            folder = stage / (slug.strip(".-") or "run")
            folder.mkdir()
            if fresh:  # the weights copied here, off the GUI thread (the busy dialog is modal: nothing trains)
                save_checkpoint(folder / "init.pt", checkpoint_payload(model, arch=arch, include_rng=False))
            run_toml = folder / "run.toml"
            config.run_dir = None
            config.to_toml(run_toml)
            try:  # the code it names ran here after Start's trust question (or was typed here): the same decision
                check_run_trust(run_toml, trust=False)
                trust = False
            except TrustRequired:
                trust = True
            return submit(run_toml, entry.host, trust=trust, **options)
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    where = f"{entry.host} (SLURM)" if entry.slurm else entry.host
    try:
        run = run_in_background(work, f"Copying the run to {where} and starting it…", panel)
    except Exception as exc:  # noqa: BLE001 - a refusal, ssh's own reason, a file that cannot be written: one line
        panel.prompts.error(f"Run on {entry.host}: {one_line(exc)}")
        return None
    how = f"SLURM job {run.job}" if run.job else "started detached"
    panel.session.show_status(f"{run.id} on {run.host}: {how}. Runs › On hosts shows its state, Attach steers "
                              f"it, Pull brings its folder here (or: workbench runs --host {run.host})", SUBMITTED_MS)
    return run
