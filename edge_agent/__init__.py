"""The device daemon (``yimi edge run``) and one-shot device commands (``yimi say``)."""
