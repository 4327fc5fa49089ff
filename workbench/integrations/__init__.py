"""Framework integrations of :func:`workbench.attach`: one callback per training framework.

``workbench.integrations.lightning.WorkbenchCallback`` opens a Lightning
``Trainer.fit`` to Workbench's window, ``workbench.integrations.transformers.WorkbenchCallback``
a Hugging Face ``Trainer.train``. Each module imports its framework, so import
the one you use; this package imports nothing.
"""
