"""Identities, certificates, device profiles, bundles, pairing codes and revocation."""
