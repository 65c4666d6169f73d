"""Gumbel AlphaZero self-play: many games per batch, external engines, processes, record writing."""
