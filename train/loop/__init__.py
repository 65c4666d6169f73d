"""The learning loop: self-play -> train -> export -> evaluate, generation after generation."""
