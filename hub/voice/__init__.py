"""Voice on the hub: hearing (audio → transcript → scope), the voiceprint authority, wake
arbitration."""
