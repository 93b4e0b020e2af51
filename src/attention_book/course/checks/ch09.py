"""Checks of chapter 9's graded exercises (efficient attention); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import math

import torch

from ...attention import scaled_dot_product_attention
from .common import CASES, Check, case_generator, matches, sizes, value_problem


def check_running_max_and_sum(running_max_and_sum, seed: int = 0) -> str | None:
    """Chapter 9: one pass over x (N,) in blocks -> (max of x, sum of exp(x − max))."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        x = torch.randn(int(torch.randint(1, 30, (1,), generator=gen)), generator=gen, dtype=torch.float64) * 5
        block = int(torch.randint(1, 8, (1,), generator=gen))
        m, l = (float(v) for v in running_max_and_sum(x, block))
        expected_m = float(x.max())
        expected_l = float(torch.exp(x - expected_m).sum())
        if not math.isclose(m, expected_m, rel_tol=1e-9, abs_tol=1e-12):
            return f"the running maximum ends at {m:.4f}, the maximum of x is {expected_m:.4f} (block size {block})"
        if not math.isclose(l, expected_l, rel_tol=1e-9):
            return (f"the running sum ends at {l:.4f}, expected {expected_l:.4f}: when a block raises the maximum "
                    f"from m to m', multiply the sum so far by exp(m − m')")
    return _masked_running_problem(running_max_and_sum)


GUARD = ("subtract 0 while the maximum is still −∞ (the chapter's finite_or_zero): masked scores then give "
         "exp(−∞) = 0")


def _masked_running_problem(running_max_and_sum) -> str | None:
    """Blocks of masked (−∞) scores, and an empty x: the maximum stays −∞ and the sum 0 until a finite score."""
    inf = math.inf
    cases = [(torch.tensor([-inf, -inf, -inf, 1.0, 2.5, -0.5], dtype=torch.float64), 3, "a first block of −∞"),
             (torch.full((6,), -inf, dtype=torch.float64), 4, "every score −∞"),
             (torch.zeros(0, dtype=torch.float64), 2, "an empty x")]
    for x, block, what in cases:
        m, l = (float(v) for v in running_max_and_sum(x, block))
        finite = x[torch.isfinite(x)]
        expected_m = float(finite.max()) if len(finite) else -inf
        expected_l = float(torch.exp(finite - expected_m).sum()) if len(finite) else 0.0
        if math.isnan(m) or math.isnan(l):
            return f"with {what} (block size {block}) you return NaN: exp(m − m') = exp(−∞ + ∞) is NaN; " + GUARD
        if m != expected_m or not math.isclose(l, expected_l, rel_tol=1e-9, abs_tol=1e-12):
            return f"with {what} (block size {block}): got m = {m}, l = {l}, expected m = {expected_m}, l = {expected_l}"
    return None


def check_merge_partials(merge_partials, seed: int = 0) -> str | None:
    """Chapter 9: two blocks' (m, l, acc) for one query, acc = Σ exp(s − m) v, -> the (m, l, acc) of both."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        n_a, n_b, d = sizes(gen, 3, 6)
        s = torch.randn(n_a + n_b, generator=gen, dtype=torch.float64) * 4
        v = torch.randn(n_a + n_b, d, generator=gen, dtype=torch.float64)

        def partial(scores, values):
            m = scores.max()
            return m, torch.exp(scores - m).sum(), torch.exp(scores - m) @ values

        a, b = partial(s[:n_a], v[:n_a]), partial(s[n_a:], v[n_a:])
        m, l, acc = (torch.as_tensor(x, dtype=torch.float64) for x in merge_partials(*a, *b))
        expected = partial(s, v)
        if not math.isclose(float(m), float(expected[0]), rel_tol=1e-9):
            return f"the merged maximum is {float(m):.4f}, expected max(m_a, m_b) = {float(expected[0]):.4f}"
        if not math.isclose(float(l), float(expected[1]), rel_tol=1e-9):
            if math.isclose(float(l), float(a[1] + b[1]), rel_tol=1e-9):
                return "l_a + l_b adds sums taken against different maxima: rescale each by exp(m_x − m) first"
            return f"the merged sum is {float(l):.4f}, expected {float(expected[1]):.4f}"
        if problem := value_problem(acc, expected[2], "the merged accumulator", atol=1e-9):
            return problem + ": rescale each block's acc by exp(m_x − m), like its sum"
    return _empty_merge_problem(merge_partials)


def _empty_merge_problem(merge_partials) -> str | None:
    """Partials of no key (empty or fully masked chunks): m = −∞, l = 0, acc = 0; merged, they stay so."""
    empty = (torch.tensor(-math.inf, dtype=torch.float64), torch.tensor(0.0, dtype=torch.float64),
             torch.zeros(3, dtype=torch.float64))
    full = (torch.tensor(1.5, dtype=torch.float64), torch.tensor(2.0, dtype=torch.float64),
            torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64))
    for a, b, what, expected in ((empty, empty, "two partials of no key", empty),
                                 (empty, full, "a partial of no key and a full one", full)):
        got = [torch.as_tensor(x, dtype=torch.float64) for x in merge_partials(*a, *b)]
        if any(bool(torch.isnan(x).any()) for x in got):
            return (f"{what} (m = −∞, l = 0, acc = 0) give NaN: exp(m_a − m) = exp(−∞ + ∞) is NaN when m = −∞; "
                    + GUARD)
        if not all(torch.equal(x, y) for x, y in zip(got, expected, strict=True)):
            return f"{what}: got (m, l, acc) = {[x.tolist() for x in got]}, expected {[y.tolist() for y in expected]}"
    return None


def causal_tiles(T: int, S: int, block: int) -> int:
    """How many (query block, key block) tiles causal tiled attention computes when it skips the future."""
    return sum(math.ceil((S - T + i + min(block, T - i)) / block) for i in range(0, T, block))


def check_causal_tiled_attention(causal_tiled_attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 9: q (T, d), the last T of S positions, k, v (S, d), blocks of `block` queries and keys ->
    (causal softmax(Q Kᵀ / √d) V (T, d), the number of tiles computed)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T, extra, d = sizes(gen, 3, 9)
        S, block = T + extra - 1, int(torch.randint(1, 5, (1,), generator=gen))
        if case == 0:  # more keys than the head dim: a (T, S) matrix outgrows every tile and output
            T, S, d, block = 6, 13, 3, 2
        q, k, v = (torch.randn(n, d, generator=gen, dtype=torch.float64) for n in (T, S, S))
        output, tiles = causal_tiled_attention_by_hand(q, k, v, block)
        expected, _ = scaled_dot_product_attention(q, k, v, torch.ones(T, S, dtype=torch.bool).tril(S - T))
        if not matches(output, expected, atol=1e-9):
            top_left, _ = scaled_dot_product_attention(q, k, v, torch.ones(T, S, dtype=torch.bool).tril())
            if S > T and matches(output, top_left, atol=1e-9):
                return (f"with T = {T} < S = {S} your mask is top-left: the queries are the last T positions, so "
                        f"query i sits at position S − T + i = {S - T} + i and sees keys 0 … S − T + i")
            return value_problem(output, expected, f"the output for T={T}, S={S}, block {block}: row",
                                 atol=1e-9) or "wrong output"
        wanted, everything = causal_tiles(T, S, block), math.ceil(T / block) * math.ceil(S / block)
        if int(tiles) != wanted:
            if int(tiles) == everything and wanted < everything:
                return (f"you computed all {everything} tiles for T={T}, S={S}, block {block}; only {wanted} touch "
                        f"the causal past: stop a query block's loop after the key block that holds the position "
                        f"of its last query, S − T + i + n − 1")
            return f"you counted {int(tiles)} tiles for T={T}, S={S}, block {block}; skipping the future leaves {wanted}"
    return None


def check_tiled_backward(tiled_backward_by_hand, seed: int = 0) -> str | None:
    """Chapter 9: dQ, dK, dV of softmax(Q Kᵀ / √d) V from q (T, d), k (S, d), v (S, d_v), the output o, the
    row log-sum-exp lse (T,) and dO (T, d_v), recomputing P a tile of `block` keys at a time."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T, S, d = sizes(gen, 3, 8)
        block = int(torch.randint(1, 5, (1,), generator=gen))
        if case == 0:  # more queries and keys than the head dim: a (T, S) matrix outgrows every tile
            T, S, d, block = 9, 14, 3, 4
        q, k, v, d_o = (torch.randn(n, d, generator=gen, dtype=torch.float64) for n in (T, S, S, T))
        x = [t.clone().requires_grad_() for t in (q, k, v)]
        scores = x[0] @ x[1].T / math.sqrt(d)  # (T, S)
        output = torch.softmax(scores, -1) @ x[2]
        expected = torch.autograd.grad(output, x, d_o)
        lse = torch.logsumexp(scores, -1).detach()
        got = tiled_backward_by_hand(q, k, v, output.detach(), lse, d_o, block)
        names = ("dQ", "dK", "dV")
        for name, g, e in zip(names, got, expected, strict=True):
            if matches(g, e, atol=1e-9):
                continue
            p = torch.exp(q @ k.T / math.sqrt(d) - lse[:, None])  # (T, S)
            d_z_without_d = p * (d_o @ v.T)  # P ∘ dP, the Jacobian's D left out
            if name != "dV" and matches(g, (d_z_without_d @ k if name == "dQ" else d_z_without_d.T @ q)
                                        / math.sqrt(d), atol=1e-9):
                return "dZ = P ∘ dP misses the softmax's Jacobian: dZ = P ∘ (dP − D), with D_i = dO_i · O_i"
            return value_problem(g, e, f"{name} for T={T}, S={S}, block {block}: row", atol=1e-9) or f"wrong {name}"
    return None


def _backward_bound(q, k, v, o, lse, d_o, block) -> int:
    """The most elements one tensor of the tiled backward needs: a (T, block) tile, or a gradient."""
    T, S = q.shape[0], k.shape[0]
    return max(T * block, T * q.shape[1], T * v.shape[1], S * k.shape[1], S * v.shape[1])


CHECKS: dict[str, Check] = {
    "ch9.running_max_and_sum": Check(check_running_max_and_sum, "running_max_and_sum",
          forbidden=("attention_book.efficient.online_softmax", "attention_book.efficient.online_max_and_sum"),
          largest=lambda x, block: block, method="read x in blocks of block_size, one block at a time"),
    "ch9.merge_partials": Check(check_merge_partials, "merge_partials",
          forbidden=("attention_book.efficient.merge_partials",)),
    "ch9.causal_tiles": Check(check_causal_tiled_attention, "causal_tiled_attention_by_hand",
          forbidden=("attention_book.efficient.tiled_attention", "attention_book.efficient.tiled_attention_forward",
                     "attention_book.attention.scaled_dot_product_attention",
                     "torch.nn.functional.scaled_dot_product_attention"),
          # a tile, a block of queries' row of keys (a mask row, say), the inputs, the output
          largest=lambda q, k, v, block: max(block * max(block, len(k), q.shape[1], v.shape[1]),
                                            len(q) * v.shape[1], k.numel(), v.numel()),
          method=("compute one (query block, key block) tile of scores at a time, never the whole (T, S) "
                  "matrix")),
    "ch9.tiled_backward": Check(check_tiled_backward, "tiled_backward_by_hand",
          forbidden=("attention_book.efficient.tiled_attention_backward", "attention_book.efficient.tiled_attention",
                     "torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward"),
          largest=_backward_bound,
          method=("recompute P one block of keys at a time, (T, block) per tile, never the whole (T, S) "
                  "matrix")),
}
