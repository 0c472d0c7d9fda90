"""The wire schema (``mesh.proto`` and its generated modules), codec helpers and user-facing
error texts.
"""
