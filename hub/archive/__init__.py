"""L5 archive: raw audio, images and events — hot on the hub's disk, then cold packs.

- :mod:`hub.archive.writer`: the batching hot writer (500 ms / 20 frames / 64 KiB).
- :mod:`hub.archive.admission`: disk admission (free bytes and inodes over a reserve).
- :mod:`hub.archive.archive`: the hot store and index, packing, verification, retention,
  deletion and repacking.
- :mod:`hub.archive.pack`: the lossless ``L5P1`` cold pack format (FLAC / gzip-1 chunks).
- :mod:`hub.archive.targets`: a directory or a WebDAV server for the packs.
- :mod:`hub.archive.maintainer`: the background upkeep rounds.
- :mod:`cli.archive`: ``yimi archive status|pack|verify``.
"""
