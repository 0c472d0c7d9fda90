"""Worldlines: work that changes the owner's files runs on a fork of the workspace.

:class:`~storage.worldlines.Worldlines` (re-exported as ``hub.worldlines.store``; the Mac's
executor forks its allowed folders with it too) forks a workspace folder from one base (a Btrfs
snapshot where the folder is a Btrfs subvolume, else ``cp --reflink=always`` where the
filesystem shares extents, else a plain copy), shows a fork's diff, and commits (the fork
becomes current, the old current goes to bounded history), discards, keeps or rolls back.
"""
