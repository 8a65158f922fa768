"""noisylabels: learning with noisy labels in PyTorch Lightning (VRNL and its baselines).

Transition matrices throughout are row-stochastic: ``T[i, j] = P(noisy = j | clean = i)``.
"""

__version__ = "0.1.0"
