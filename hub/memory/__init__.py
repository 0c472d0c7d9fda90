"""Memory: L2 core profile, L3 assertions, sensitivity and deletion propagation.

Recall (index, fusion) and the L5 archive live beside this in their own modules.
"""
