"""Decoding (§6.1): greedy and beam search over one narrow step interface."""
