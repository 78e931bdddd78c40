"""Neural-network layers, optimizers and state dicts."""
