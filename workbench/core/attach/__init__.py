"""Attach to a user's own training script: the script's side (:mod:`.script`), the socket
(:mod:`.server`, :mod:`.wire`), the window's side (:mod:`.client`) and how scripts are found
(:mod:`.discovery`). Qt-free; nothing here runs code named by a message."""
