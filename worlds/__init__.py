"""Fakes of the outside world (mail server, Home Assistant MQTT devices) for contract runs and
tests. Named as fakes; they speak the real protocols."""
