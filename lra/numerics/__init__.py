"""The numeric-deviation study of "Is Flash Attention Stable?" (Golden et al. 2024)."""
