"""The hub's mesh: the daemon (composition root), the broker it runs, its gRPC service."""
