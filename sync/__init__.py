"""Moving state between nodes: envelopes, MQTT session, discovery, hub location, outbox,
counters.
"""
