"""The shogi engine: rules and network (core), records, search, backends, USI play, self-play, matches."""
