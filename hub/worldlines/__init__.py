"""Worldlines: work that changes the owner's files runs on a fork of the workspace.

:class:`~hub.worldlines.store.Worldlines` forks a workspace folder from one base (a Btrfs
snapshot where the folder is a Btrfs subvolume, else ``cp --reflink=always`` where the
filesystem shares extents, else a plain copy), shows a fork's diff, and commits (the fork
becomes current, the old current goes to bounded history), discards, keeps or rolls back.
"""
