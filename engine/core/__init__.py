"""The game and the network: features, move labels, rules, positions, the ResNet, dlshogi's files."""
