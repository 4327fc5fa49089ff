"""Pure PyTorch logic. Never imports Qt (PySide6) or pyqtgraph."""
