"""Local databases: SQLite (apsw) opened one way — WAL, busy timeout, mode 0600, idempotent
schema — below every package that keeps state (sync, provisioning, edge_agent, hub)."""
