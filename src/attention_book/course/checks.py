"""Checks for the graded exercises: a student's function against the reference on random inputs (course
tooling; the chapters call `check` through `attention_book.grader`).

A check is one function `check_x(student, seed)` that calls `student` on random inputs drawn from `seed`
and returns None when every answer is right, else the first specific problem it finds; its registry entry
in CHECKS names the exercise ("chN.name") and the function a solution cell defines. The same check gives
the notebook's instant feedback (seed 0, the student's function called in the kernel) and the grade
(a secret seed, the function called in a sandbox by `attention_book.course.grading`).
"""

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from ..attention import scaled_dot_product_attention
from ..causal import causal_mask
from ..kv_cache import kv_cache_bytes
from ..tokens import build_vocab

CASES = 20  # random inputs per check
WORDS = "the cat sat on a mat and ate one fish while it rained outside".split()


@dataclass(frozen=True)
class Check:
    """A registry entry: the check function and the name of the function the solution cell defines."""

    run: Callable  # (student function, seed) -> problem or None
    function: str


@dataclass
class Result:
    exercise: str
    passed: bool
    message: str

    def __str__(self) -> str:
        return f"{'✓' if self.passed else '✗'} {self.exercise}: {self.message}"


class StudentRaised(Exception):
    """The student's function raised `name: message` (in the kernel or in the sandbox)."""

    def __init__(self, name: str, message: str):
        self.name, self.message = name, message
        super().__init__(f"{name}: {message}")


class Stopped(Exception):
    """Grading of the function cannot go on (its sandbox ended); the message says why."""


def calling(student_function) -> Callable:
    """`student_function`, with whatever it raises turned into `StudentRaised` (so that a check's own
    errors on a bad result are told apart from the student's)."""
    def call(*args):
        try:
            return student_function(*args)
        except Exception as error:  # noqa: BLE001 - the student's error is feedback
            raise StudentRaised(type(error).__name__, str(error)) from error
    return call


def evaluate(exercise: str, student_function, seed: int = 0, call: Callable | None = None) -> Result:
    """Run the named check on `student_function` (or on `call`, which raises `StudentRaised` itself) and
    return the verdict with its feedback."""
    if exercise not in CHECKS:
        raise KeyError(f"no check named {exercise!r}; known: {sorted(CHECKS)}")
    try:
        problem = CHECKS[exercise].run(call or calling(student_function), seed)
    except StudentRaised as error:
        problem = f"not implemented yet. Hint: {error.message}" if error.name == "NotImplementedError" else \
            f"your function raised {error.name}: {error.message}"
    except Stopped as error:
        problem = str(error)
    except Exception as error:  # a result the check cannot even read is feedback too
        problem = f"your function's result could not be checked ({type(error).__name__}: {error})"
    return Result(exercise, problem is None, problem or f"passed on {CASES} random cases")


def check(exercise: str, student_function) -> None:
    """Instant feedback in the notebook (Colab or Jupyter): `evaluate` and print. Not the grade."""
    print(evaluate(exercise, student_function))


def _generator(seed: int, case: int) -> torch.Generator:
    """The random inputs of one case: seed 0 in the notebooks, a secret one when grading."""
    return torch.Generator().manual_seed(1000 + case + 104_729 * seed)


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


def check_vocab(build_vocab_by_hand, seed: int = 0) -> str | None:
    """Chapter 1: each distinct word -> its rank in sorted order."""
    rng = np.random.default_rng([seed, 1])
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


def check_attention(attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 2: softmax(Q Kᵀ / √d_k) V for q (T, d_k), k (S, d_k), v (S, d_v)."""
    for case in range(CASES):
        gen = _generator(seed, case)
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


def check_split_heads(split_heads_by_hand, seed: int = 0) -> str | None:
    """Chapter 3: (B, T, E) -> (B, H, T, E/H), head h holding columns h·E/H to (h+1)·E/H − 1."""
    for case in range(CASES):
        gen = _generator(seed, case)
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


def check_padding_mask(padding_mask_by_hand, seed: int = 0) -> str | None:
    """Chapter 4: lengths (B,) and S -> boolean (B, S), True for real tokens (the package's convention)."""
    for case in range(CASES):
        gen = _generator(seed, case)
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


def check_causal_mask(causal_mask_by_hand, seed: int = 0) -> str | None:
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
        if problem := _shape_problem(got, expected.shape, "the projection"):
            return problem
        if np.allclose(got, expected - bias[:, None, :]):
            return "the bias is missing: add bias (H, d_k) to every position of every head"
        if not np.allclose(got, expected):
            return f"the values differ from x · kernel + bias (largest difference {np.abs(got - expected).max():.3g})"
    return None


def check_cache_size(kv_cache_size, seed: int = 0) -> str | None:
    """Chapter 7: bytes of a full KV cache, 2 × layers × heads × head_dim × length × bytes per value."""
    rng = np.random.default_rng([seed, 7])
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


def check_running_max_and_sum(running_max_and_sum, seed: int = 0) -> str | None:
    """Chapter 8: one pass over x (N,) in blocks -> (max of x, sum of exp(x − max))."""
    for case in range(CASES):
        gen = _generator(seed, case)
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


CHECKS: dict[str, Check] = {
    "ch1.vocab": Check(check_vocab, "build_vocab_by_hand"),
    "ch2.attention": Check(check_attention, "attention_by_hand"),
    "ch3.split_heads": Check(check_split_heads, "split_heads_by_hand"),
    "ch4.padding_mask": Check(check_padding_mask, "padding_mask_by_hand"),
    "ch5.causal_mask": Check(check_causal_mask, "causal_mask_by_hand"),
    "ch6.keras_projection": Check(check_keras_projection, "keras_projection"),
    "ch7.cache_size": Check(check_cache_size, "kv_cache_size"),
    "ch8.running_max_and_sum": Check(check_running_max_and_sum, "running_max_and_sum"),
}
