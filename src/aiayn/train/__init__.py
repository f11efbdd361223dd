"""Training (§5): the schedule, the loss, the loop and checkpoints."""
