"""The Model wing: the module tree (QAbstractItemModel + view) and the Details panel."""
