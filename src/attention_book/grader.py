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
from .kv_cache import RingKVCache, kv_cache_bytes
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
    """Chapter 7: bytes of a KV cache, 2 × layers × key/value heads × head_dim × positions held × bytes per
    value × batch, where a sliding window caps the positions held at the window."""
    rng = np.random.default_rng(7)
    for case in range(CASES):
        layers, kv_heads, head_dim, length = (int(n) for n in rng.integers(1, 64, size=4))
        per_value, batch = int(rng.choice([1, 2, 4])), int(rng.integers(1, 9))
        window = None if case % 2 else int(rng.integers(1, 64))
        held = length if window is None else min(length, window)
        got = kv_cache_size(layers, kv_heads, head_dim, length, per_value, batch=batch, window=window)
        expected = kv_cache_bytes(layers, kv_heads, head_dim, held, per_value, batch=batch)
        if got == expected:
            continue
        if got * 2 == expected:
            return "half the expected size: every position stores a key AND a value (the factor 2)"
        if got == expected // batch and batch > 1:
            return f"that is one sequence's cache: the batch of {batch} sequences keeps {batch} of them"
        if window is not None and held < length and got == kv_cache_bytes(layers, kv_heads, head_dim, length,
                                                                          per_value, batch=batch):
            return (f"with window={window} and length={length} a rolling cache holds only the last {window} "
                    "positions: use min(length, window)")
        if window is not None and length < window and got == kv_cache_bytes(layers, kv_heads, head_dim, window,
                                                                             per_value, batch=batch):
            return f"length={length} is shorter than window={window}: the cache holds only the {length} positions seen"
        return (f"for {layers} layers, {kv_heads} key/value heads of {head_dim}, {length} positions, window {window}, "
                f"{per_value}-byte values and batch {batch} you get {got}, expected {expected}")
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


def check_ring_slots(ring_slots) -> str | None:
    """Chapter 7: after positions 0 … length − 1 went into a ring of `window` slots (position p in slot
    p mod window), the position each slot holds, in slot order."""
    for case in range(CASES):
        gen = _generator(case)
        length, window = _sizes(gen, 2, 13)
        expected = RingKVCache(window).slot_positions(length)
        got = torch.as_tensor(ring_slots(length, window)).flatten()
        if len(got) != len(expected):
            return (f"length={length}, window={window}: a ring of {window} slots holds min(length, window) = "
                    f"{len(expected)} positions, yours gives {len(got)}")
        if torch.equal(got, expected):
            continue
        if torch.equal(got.sort().values, expected.sort().values):
            return (f"length={length}, window={window}: the right positions, in the wrong order; the answer goes "
                    f"slot by slot, and slot k holds the position p with p mod window == k")
        k = int(torch.nonzero(got != expected)[0])
        return (f"length={length}, window={window}: slot {k} should hold position {int(expected[k])} (the latest p "
                f"below length with p mod {window} == {k}), yours says {int(got[k])}")
    return None


def check_decode_step(decode_step) -> str | None:
    """Chapter 7: one cached step: append k_new, v_new to the cache, attend with the single query over all."""
    for case in range(CASES):
        gen = _generator(case)
        B, H, S, d = _sizes(gen, 4, 5)
        q, k_new, v_new = (torch.randn(B, H, 1, d, generator=gen, dtype=torch.float64) for _ in range(3))
        k_cache, v_cache = (torch.randn(B, H, S, d, generator=gen, dtype=torch.float64) for _ in range(2))
        got = decode_step(q, k_new, v_new, k_cache.clone(), v_cache.clone())
        if not isinstance(got, tuple) or len(got) != 3:
            return "return three things: (output (B, H, 1, d_v), keys (B, H, S + 1, d_k), values (B, H, S + 1, d_v))"
        output, keys, values = got
        expected_keys, expected_values = torch.cat([k_cache, k_new], dim=-2), torch.cat([v_cache, v_new], dim=-2)
        if tuple(keys.shape) == (B, H, S, d):
            return "the returned keys still have S positions: append the new key (the cache grows by one each step)"
        if problem := _shape_problem(keys, expected_keys.shape, "the keys"):
            return problem
        if torch.allclose(keys, torch.cat([k_new, k_cache], dim=-2)):
            return "the new key went in front: the cache keeps positions in order, so append it at the end"
        if not (torch.allclose(keys, expected_keys) and torch.allclose(values, expected_values)):
            return "the returned keys and values should be the cached ones followed by the new ones (torch.cat, dim=-2)"
        if problem := _shape_problem(output, (B, H, 1, d), "the output"):
            return problem
        scores = q @ expected_keys.transpose(-2, -1)  # (B, H, 1, S + 1)
        expected = torch.softmax(scores / math.sqrt(d), dim=-1) @ expected_values
        if d > 1 and torch.allclose(output, torch.softmax(scores, dim=-1) @ expected_values):
            return "the scores are not scaled: divide q · k by sqrt(d_k) before the softmax"
        if torch.allclose(output, torch.softmax(q @ k_cache.transpose(-2, -1) / math.sqrt(d), dim=-1) @ v_cache):
            return "the output ignores the new position: attend over the keys and values after appending"
        if not torch.allclose(output, expected):
            return f"the output differs from softmax(q Kᵀ / √d_k) V (largest difference {(output - expected).abs().max():.3g})"
    return None


CHECKS = {
    "ch1.vocab": check_vocab,
    "ch2.attention": check_attention,
    "ch3.split_heads": check_split_heads,
    "ch4.padding_mask": check_padding_mask,
    "ch5.causal_mask": check_causal_mask,
    "ch6.keras_projection": check_keras_projection,
    "ch7.cache_size": check_cache_size,
    "ch7.ring_slots": check_ring_slots,
    "ch7.decode_step": check_decode_step,
    "ch8.running_max_and_sum": check_running_max_and_sum,
}
