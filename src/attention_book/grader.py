"""Checks for the graded exercises: a student's function against the reference on random inputs.

Every chapter's graded exercise ends with `check("chN.name", their_function)`, which prints immediate,
specific feedback. When the environment variable ATTENTION_BOOK_GRADES names a file, each result is
also appended to it as a JSON line; `python -m attention_book.assignments grade` uses that to grade a
folder of submitted notebooks.
"""

import json
import math
import os
from dataclasses import asdict, dataclass

import numpy as np
import torch

from .attention import scaled_dot_product_attention
from .causal import causal_mask
from .kv_cache import kv_cache_bytes
from .tokens import build_vocab

CASES = 20  # random inputs per check
WORDS = "the cat sat on a mat and ate one fish while it rained outside".split()


@dataclass
class Result:
    exercise: str
    passed: bool
    message: str

    def __str__(self) -> str:
        return f"{'✓' if self.passed else '✗'} {self.exercise}: {self.message}"


def evaluate(exercise: str, student_function) -> Result:
    """Run the named check on `student_function` and return the verdict with its feedback."""
    if exercise not in CHECKS:
        raise KeyError(f"no check named {exercise!r}; known: {sorted(CHECKS)}")
    try:
        problem = CHECKS[exercise](student_function)
    except NotImplementedError as error:
        problem = f"not implemented yet. Hint: {error}"
    except Exception as error:  # a student's bug is feedback, not a crash of the notebook
        problem = f"your function raised {type(error).__name__}: {error}"
    return Result(exercise, problem is None, problem or f"passed on {CASES} random cases")


def check(exercise: str, student_function) -> None:
    """`evaluate`, print the feedback, and record it for the grading command (see the module docstring)."""
    result = evaluate(exercise, student_function)
    print(result)
    if path := os.environ.get("ATTENTION_BOOK_GRADES"):
        with open(path, "a") as file:
            file.write(json.dumps(asdict(result)) + "\n")


def _generator(case: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + case)


def _sizes(gen: torch.Generator, count: int, high: int) -> list[int]:
    """`count` random sizes from 1 to high − 1."""
    return [int(torch.randint(1, high, (1,), generator=gen)) for _ in range(count)]


def _boolean_problem(mask) -> str | None:
    if mask.dtype != torch.bool:
        return f"the mask should be boolean (True = may attend), yours has dtype {mask.dtype}"
    return None


def _shape_problem(got, expected_shape, what: str) -> str | None:
    shape = tuple(getattr(got, "shape", ()))
    if shape != tuple(expected_shape):
        return f"{what} should have shape {tuple(expected_shape)}, yours has {shape}"
    return None


def check_vocab(build_vocab_by_hand) -> str | None:
    """Chapter 1: each distinct word -> its rank in sorted order."""
    rng = np.random.default_rng(0)
    for _ in range(CASES):
        sentence = " ".join(rng.choice(WORDS, size=rng.integers(1, 12)))
        got, expected = build_vocab_by_hand(sentence), build_vocab(sentence)
        if set(got) != set(expected):
            return f"for {sentence!r} the keys should be the distinct words {sorted(expected)}, yours are {sorted(got)}"
        for word, index in expected.items():
            if got[word] != index:
                return (f"for {sentence!r}, {word!r} got index {got[word]} but should get {index}: indices follow "
                        f"the sorted order of the distinct words")
    return None


def check_attention(attention_by_hand) -> str | None:
    """Chapter 2: softmax(Q Kᵀ / √d_k) V for q (T, d_k), k (S, d_k), v (S, d_v)."""
    for case in range(CASES):
        gen = _generator(case)
        T, S, d_k, d_v = _sizes(gen, 4, 7)
        q, k, v = torch.randn(T, d_k, generator=gen), torch.randn(S, d_k, generator=gen), torch.randn(S, d_v, generator=gen)
        got = attention_by_hand(q, k, v)
        if problem := _shape_problem(got, (T, d_v), "the context vectors"):
            return problem
        expected, _ = scaled_dot_product_attention(q, k, v)
        if torch.allclose(got, expected, atol=1e-5):
            continue
        if torch.allclose(got, torch.softmax(q @ k.T, dim=-1) @ v, atol=1e-5):
            return f"the scores are not scaled: divide Q Kᵀ by √d_k = {math.sqrt(d_k):.3f} before the softmax"
        if S == T and torch.allclose(got, torch.softmax(q @ k.T / math.sqrt(d_k), dim=0) @ v, atol=1e-5):
            return "the softmax runs over the queries (dim 0); each query's weights over the keys must sum to 1 (dim -1)"
        row = int((got - expected).abs().sum(-1).argmax())
        return f"query {row} gets {got[row].tolist()}, expected {expected[row].tolist()}"
    return None


def check_split_heads(split_heads_by_hand) -> str | None:
    """Chapter 3: (B, T, E) -> (B, H, T, E/H), head h holding columns h·E/H to (h+1)·E/H − 1."""
    for case in range(CASES):
        gen = _generator(case)
        B, T, H, d = _sizes(gen, 4, 5)
        x = torch.randn(B, T, H * d, generator=gen)
        got = split_heads_by_hand(x, H)
        if problem := _shape_problem(got, (B, H, T, d), f"splitting (B, T, E) = {tuple(x.shape)} into {H} heads"):
            return problem
        expected = x.view(B, T, H, d).transpose(1, 2)
        if not torch.equal(got, expected):
            return (f"head 1 of position 0 should hold columns {d}..{2 * d - 1} of x, i.e. x[0, 0, {d}:{2 * d}]; "
                    f"reshape to (B, T, H, E/H) first, then swap T and H")
    return None


def check_padding_mask(padding_mask_by_hand) -> str | None:
    """Chapter 4: lengths (B,) and S -> boolean (B, S), True for real tokens (the package's convention)."""
    for case in range(CASES):
        gen = _generator(case)
        S = int(torch.randint(1, 9, (1,), generator=gen))
        lengths = torch.randint(1, S + 1, (int(torch.randint(1, 5, (1,), generator=gen)),), generator=gen)
        got = padding_mask_by_hand(lengths, S)
        if problem := _shape_problem(got, (len(lengths), S), "the mask"):
            return problem
        if problem := _boolean_problem(got):
            return problem
        expected = torch.arange(S) < lengths[:, None]
        for b, s in zip(*torch.nonzero(got != expected).T.tolist(), strict=True):
            what = "lets queries see padded position" if got[b, s] else "hides real position"
            return f"sequence {b} has length {int(lengths[b])}: your mask {what} {s}"
    return None


def check_causal_mask(causal_mask_by_hand) -> str | None:
    """Chapter 5: boolean (T, T), True where query i may attend to key j, that is j <= i."""
    for T in range(1, CASES + 1):
        got = causal_mask_by_hand(T)
        if problem := _shape_problem(got, (T, T), f"the mask for T={T}"):
            return problem
        if problem := _boolean_problem(got):
            return problem
        expected = causal_mask(T)
        wrong = torch.nonzero(got != expected).tolist()
        if wrong:
            i, j = wrong[0]
            if got[i, j]:
                return f"your causal mask lets position {i} see position {j}, which comes after it"
            return f"your causal mask stops position {i} from seeing position {j}" + (" (itself)" if i == j else "")
    return None


def check_keras_projection(keras_projection) -> str | None:
    """Chapter 6: x (B, T, E) · kernel (E, H, d_k) + bias (H, d_k) -> (B, H, T, d_k)."""
    rng = np.random.default_rng(6)
    for _ in range(CASES):
        B, T, E, H, K = rng.integers(1, 5, size=5)
        x, kernel, bias = rng.normal(size=(B, T, E)), rng.normal(size=(E, H, K)), rng.normal(size=(H, K))
        got = np.asarray(keras_projection(x, kernel, bias))
        expected = np.einsum("bte,ehk->bhtk", x, kernel) + bias[:, None, :]
        if got.shape == (B, T, H, K) and (B, T, H, K) != (B, H, T, K):
            return f"your result is laid out (B, T, H, d_k) = {got.shape}; the heads come before the positions: (B, H, T, d_k)"
        if problem := _shape_problem(got, expected.shape, "the projection"):
            return problem
        if np.allclose(got, expected - bias[:, None, :]):
            return "the bias is missing: add bias (H, d_k) to every position of every head"
        if not np.allclose(got, expected):
            return f"the values differ from x · kernel + bias (largest difference {np.abs(got - expected).max():.3g})"
    return None


def check_cache_size(kv_cache_size) -> str | None:
    """Chapter 7: bytes of a full KV cache, 2 × layers × heads × head_dim × length × bytes per value."""
    rng = np.random.default_rng(7)
    for _ in range(CASES):
        sizes = [int(n) for n in rng.integers(1, 64, size=4)] + [int(rng.choice([1, 2, 4]))]
        got, expected = kv_cache_size(*sizes), kv_cache_bytes(*sizes)
        if got == expected:
            continue
        if got * 2 == expected:
            return "half the expected size: every position stores a key AND a value (the factor 2)"
        layers, heads, head_dim, length, per_value = sizes
        return (f"for {layers} layers, {heads} heads of {head_dim}, {length} positions and {per_value}-byte values "
                f"you get {got}, expected {expected}")
    return None


def check_running_max_and_sum(running_max_and_sum) -> str | None:
    """Chapter 8: one pass over x (N,) in blocks -> (max of x, sum of exp(x − max))."""
    for case in range(CASES):
        gen = _generator(case)
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
    return None


CHECKS = {
    "ch1.vocab": check_vocab,
    "ch2.attention": check_attention,
    "ch3.split_heads": check_split_heads,
    "ch4.padding_mask": check_padding_mask,
    "ch5.causal_mask": check_causal_mask,
    "ch6.keras_projection": check_keras_projection,
    "ch7.cache_size": check_cache_size,
    "ch8.running_max_and_sum": check_running_max_and_sum,
}


# Chapter 9's checks (positions and trained heads); self-contained so that they move as one block.

def check_rope(rope_by_hand) -> str | None:
    """Chapter 9: x (T, d) of positions 0 … T − 1 -> pairs (2i, 2i+1) turned by m·10000^(−2i/d)."""
    from .positions import apply_rope

    for case in range(CASES):
        gen = _generator(case)
        T, half = _sizes(gen, 2, 9)
        x = torch.randn(T + 1, 2 * half, generator=gen, dtype=torch.float64)  # (T, d)
        got, expected = rope_by_hand(x), apply_rope(x)
        if problem := _shape_problem(got, expected.shape, "the rotated x"):
            return problem
        if torch.allclose(got, x, atol=1e-6) and T > 0:
            return "your function returns x unchanged: position m must turn each pair by the angle m·θ_i"
        if not torch.allclose(got[0], x[0], atol=1e-6):
            return "position 0 should not be turned at all (its angle is 0·θ_i = 0)"
        bad = (got - expected).abs().amax(dim=0).argmax()
        if not torch.allclose(got, expected, atol=1e-6):
            return (f"feature {int(bad)} is wrong for d = {x.shape[1]}: pair i is features (2i, 2i+1), turned by "
                    f"θ_i = 10000^(−2i/d) per position: (a, b) -> (a cos − b sin, a sin + b cos)")
    return None


def check_previous_token_score(score_by_hand) -> str | None:
    """Chapter 9: weights (H, T, T) -> (H,), the mean weight of queries 1 … T − 1 on the position before them."""
    for case in range(CASES):
        gen = _generator(case)
        H, T = _sizes(gen, 2, 7)
        weights = torch.rand(H, T + 1, T + 1, generator=gen, dtype=torch.float64).tril()  # (H, T, T)
        weights = weights / weights.sum(-1, keepdim=True)
        got = score_by_hand(weights)
        expected = weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)  # (H,)
        if problem := _shape_problem(got, expected.shape, "the scores"):
            return problem
        if torch.allclose(got, weights.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1) / (T + 1), atol=1e-9):
            return f"you divide by all {T + 1} queries; query 0 has no previous position: average over the {T} others"
        if torch.allclose(got, weights.diagonal(dim1=-2, dim2=-1).mean(-1), atol=1e-9):
            return "you average the diagonal (each query on itself); the previous position is one to the left"
        if not torch.allclose(got, expected, atol=1e-9):
            return (f"for {H} heads and T = {T + 1} your scores are {[round(v, 3) for v in got.tolist()]}, expected "
                    f"{[round(v, 3) for v in expected.tolist()]}: weights[h, t, t − 1] averaged over t = 1 … T − 1")
    return None


def check_sinusoidal(encoding_by_hand) -> str | None:
    """Chapter 9: (length, width) -> PE with PE[p, 2i] = sin(p·ω_i), PE[p, 2i+1] = cos(p·ω_i)."""
    from .positions import sinusoidal_encoding

    for case in range(CASES):
        gen = _generator(case)
        length, half = _sizes(gen, 2, 12)
        got, expected = encoding_by_hand(length, 2 * half), sinusoidal_encoding(length, 2 * half)
        if problem := _shape_problem(got, expected.shape, f"PE for length {length}, width {2 * half}"):
            return problem
        got = torch.as_tensor(got, dtype=torch.float32)
        if length > 1 and torch.allclose(got[:, 0::2], expected[:, 1::2], atol=1e-5):
            return "sin and cos are swapped: even features 2i hold sin(p·ω_i), odd features 2i+1 hold cos(p·ω_i)"
        if not torch.allclose(got, expected, atol=1e-5):
            return (f"for width {2 * half}, PE differs from sin/cos(p·ω_i) with ω_i = 10000^(−2i/width); "
                    f"check the exponent uses 2i, the index of the pair's first feature")
    return None


CHECKS.update({
    "ch9.rope": check_rope,
    "ch9.previous_token_score": check_previous_token_score,
    "ch9.sinusoidal": check_sinusoidal,
})
