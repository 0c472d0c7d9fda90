"""``yimi demo``: the whole assistant on this machine, narrated (real processes, loopback)."""
