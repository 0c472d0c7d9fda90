"""Turns: admission of every utterance (:mod:`hub.turns.admission`), answering through the
brain (:mod:`hub.turns.answering`), delivery of every reply and its ACKs
(:mod:`hub.turns.delivery`), activity entries (:mod:`hub.turns.activity`) and the context
sources of owner turns (:mod:`hub.turns.context`)."""
