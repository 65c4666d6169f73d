"""Tree search over an Evaluator: Gumbel AlphaZero and PUCT, their numba trees, mate search."""
