"""Evaluation: evaluate() and its steps — encoding, the embedding cache, remembered fingerprints, suites."""
