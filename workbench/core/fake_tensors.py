"""One fake-tensor computation at a time in a process: :data:`FAKE_TENSOR_LOCK`.

``torch._subclasses.fake_tensor.FakeTensorMode`` keeps its dispatch cache on
the class (shared by every thread), and ``torch.export`` and the memory
estimate also flip process-wide switches (the MultiheadAttention fast path).
Two threads doing it at once crashed the window's process (a segmentation
fault in ``FakeTensorMode._get_output_tensor_from_cache_entry``: the memory
column's worker of one window beside another's). Every fake-tensor user in
Workbench's worker threads (the memory estimate, the Graph tab's capture, an
export) holds this lock around it; it is reentrant, so one can call another.
Qt-free.
"""

from __future__ import annotations

import threading

__all__ = ["FAKE_TENSOR_LOCK"]

#: Held around every fake-tensor computation (``FakeTensorMode``, ``torch.export``) in this process.
FAKE_TENSOR_LOCK = threading.RLock()
