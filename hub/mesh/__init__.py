"""The hub's mesh: the daemon (composition root), the mesh port (peers, sealer, openers,
replay window, drop counters), the broker it runs, its gRPC service."""
