"""Scoring: the ledger of official verdicts and the tampering counts."""
