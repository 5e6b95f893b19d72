"""Privacy attacks: membership inference (`mia`) and reconstruction (`reconstruction`)."""
