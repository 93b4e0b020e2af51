"""Why scores are divided by √d_k, measured rather than asserted (chapter 2)."""

import math

import torch


def dot_product_variance(d_k: int, n: int, generator: torch.Generator) -> float:
    """Variance of q·k over `n` draws of q, k with independent N(0, 1) components (≈ d_k)."""
    q = torch.randn(n, d_k, generator=generator)
    k = torch.randn(n, d_k, generator=generator)
    return (q * k).sum(dim=-1).var().item()


def softmax_jacobian_norm(weights: torch.Tensor) -> torch.Tensor:
    """Frobenius norm of ∂softmax/∂scores = diag(w) − w wᵀ, per row of `weights` (..., S) -> (...)."""
    jacobian = torch.diag_embed(weights) - weights.unsqueeze(-1) * weights.unsqueeze(-2)  # (..., S, S)
    return jacobian.flatten(-2).norm(dim=-1)


def softmax_saturation(d_k: int, n_keys: int, trials: int, scaled: bool, generator: torch.Generator):
    """Mean largest weight and mean softmax-Jacobian norm for random unit-variance queries and keys.

    Returns (max_weight, jacobian_norm): near (1, 0) means the softmax is one-hot and learns nothing.
    """
    q = torch.randn(trials, 1, d_k, generator=generator)  # (trials, 1, d_k)
    k = torch.randn(trials, n_keys, d_k, generator=generator)  # (trials, S, d_k)
    scores = (q @ k.transpose(-2, -1)).squeeze(1)  # (trials, S)
    if scaled:
        scores = scores / math.sqrt(d_k)
    weights = torch.softmax(scores, dim=-1)
    return weights.max(dim=-1).values.mean().item(), softmax_jacobian_norm(weights).mean().item()
