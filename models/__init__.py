"""The local model catalog and runners (VAD, wake word, speaker embedding, ASR, text
embedding). Filled by the voice issue.
"""
