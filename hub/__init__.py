"""Every authority of the home hub: the hub daemon, broker supervisor, gRPC service, timeline
store and the ``yimi`` CLI.
"""
