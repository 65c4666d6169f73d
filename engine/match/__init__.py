"""Games between USI engines: the arbiter, Elo estimates and the greedy reference player."""
