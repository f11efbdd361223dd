"""English constituency parsing, the paper's second task (§6.3): trees, linearisation, EVALB, baselines."""
