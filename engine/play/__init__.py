"""The USI engine: protocol, options and time management around the search."""
