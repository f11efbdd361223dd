"""Data (§5.1): parallel text, the subword vocabulary, batches by token count."""
