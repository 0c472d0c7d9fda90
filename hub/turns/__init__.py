"""Turns: admission of utterances, answering through the brain, delivery and ACKs, activity."""
