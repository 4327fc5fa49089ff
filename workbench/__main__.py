"""``python -m workbench`` runs the same entry point as the ``workbench`` script."""

from workbench.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
