"""The Graph dock: the model's dataflow grouped by modules (:mod:`.graph_panel`), drawn by :mod:`.graph_scene`."""
