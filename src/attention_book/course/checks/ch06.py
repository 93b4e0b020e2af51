"""Checks of chapter 6's graded exercises (the TensorFlow decoder); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import numpy as np

from .common import CASES, Check, shape_problem


def check_keras_projection(keras_projection, seed: int = 0) -> str | None:
    """Chapter 6: x (B, T, E) · kernel (E, H, d_k) + bias (H, d_k) -> (B, H, T, d_k)."""
    rng = np.random.default_rng([seed, 6])
    for _ in range(CASES):
        B, T, E, H, K = rng.integers(1, 5, size=5)
        x, kernel, bias = rng.normal(size=(B, T, E)), rng.normal(size=(E, H, K)), rng.normal(size=(H, K))
        got = np.asarray(keras_projection(x, kernel, bias))
        expected = np.einsum("bte,ehk->bhtk", x, kernel) + bias[:, None, :]
        if got.shape == (B, T, H, K) and (B, T, H, K) != (B, H, T, K):
            return f"your result is laid out (B, T, H, d_k) = {got.shape}; the heads come before the positions: (B, H, T, d_k)"
        if problem := shape_problem(got, expected.shape, "the projection"):
            return problem
        if np.allclose(got, expected - bias[:, None, :]):
            return "the bias is missing: add bias (H, d_k) to every position of every head"
        if not np.allclose(got, expected):
            return f"the values differ from x · kernel + bias (largest difference {np.abs(got - expected).max():.3g})"
    return None


def check_keras_output(keras_output, seed: int = 0) -> str | None:
    """Chapter 6: context (B, H, T, d_k) · output kernel (H, d_k, E) + bias (E,) -> (B, T, E)."""
    rng = np.random.default_rng([seed, 16])
    for _ in range(CASES):
        B, H, T, K, E = (int(n) for n in rng.integers(1, 5, size=5))
        context, kernel, bias = rng.normal(size=(B, H, T, K)), rng.normal(size=(H, K, E)), rng.normal(size=E)
        got = np.asarray(keras_output(context, kernel, bias))
        expected = np.einsum("bhtk,hke->bte", context, kernel) + bias
        if H > 1 and got.shape == (B, H, T, E):
            return f"your result keeps the head axis, {got.shape}: the output projection sums over the heads too"
        if problem := shape_problem(got, expected.shape, "the output"):
            return problem
        if np.allclose(got, expected - bias):
            return "the bias is missing: add the output bias (E,) to every position"
        if not np.allclose(got, expected):
            return f"the values differ from Σ over heads and d_k of context · kernel (largest difference " \
                   f"{np.abs(got - expected).max():.3g})"
    return None


def check_kernel_to_linear(kernel_to_linear, seed: int = 0) -> str | None:
    """Chapter 6: a Keras kernel (E, H, d_k) and bias (H, d_k) -> nn.Linear's weight (H·d_k, E) and bias (H·d_k,)."""
    rng = np.random.default_rng([seed, 26])
    for _ in range(CASES):
        E, H, K = (int(n) for n in rng.integers(1, 6, size=3))
        kernel, bias = rng.normal(size=(E, H, K)), rng.normal(size=(H, K))
        got = kernel_to_linear(kernel, bias)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return "return two arrays: (weight, bias)"
        weight, new_bias = (np.asarray(g) for g in got)
        expected = kernel.reshape(E, H * K).T
        if weight.shape == (E, H * K) and E != H * K:
            return f"nn.Linear keeps its weight as (out, in) = ({H * K}, {E}): transpose the flattened kernel"
        if problem := shape_problem(weight, expected.shape, "the weight"):
            return problem
        if E > 1 and H * K > 1 and np.allclose(weight, kernel.reshape(H * K, E)):
            return "a reshape to (H·d_k, E) mixes up the axes: flatten (E, H, d_k) to (E, H·d_k), then transpose"
        if not np.allclose(weight, expected):
            return f"weight row h·d_k + k should be kernel[:, h, k] (E={E}, H={H}, d_k={K})"
        if problem := shape_problem(new_bias, (H * K,), "the bias"):
            return problem
        if not np.allclose(new_bias, bias.reshape(-1)):
            return "bias entry h·d_k + k should be bias[h, k]"
    return None


CHECKS: dict[str, Check] = {
    "ch6.keras_projection": Check(check_keras_projection, "keras_projection",
          forbidden=("attention_book.keras_decoder.project",)),
    "ch6.keras_output": Check(check_keras_output, "keras_output",
          forbidden=()),
    "ch6.kernel_to_linear": Check(check_kernel_to_linear, "kernel_to_linear",
          forbidden=("attention_book.multihead.keras_attention_map",)),
}
