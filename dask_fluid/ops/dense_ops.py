"""Dense-network kernels of Fluid 1.8 beyond the basics: matmul, shape ops, activations."""
