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
from ..kv_cache import RingKVCache, kv_cache_bytes
from ..positions import apply_rope, rope_angles, sinusoidal_encoding, sinusoidal_shift
from ..tokens import build_vocab, encode, words

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
    """Chapter 7: bytes of a KV cache, 2 × layers × key/value heads × head_dim × positions held × bytes per
    value × batch, where a sliding window caps the positions held at the window."""
    rng = np.random.default_rng([seed, 7])
    for case in range(CASES):
        layers, kv_heads, head_dim, length = (int(n) for n in rng.integers(1, 64, size=4))
        per_value, batch = int(rng.choice([1, 2, 4])), int(rng.integers(1, 9))
        window = None if case % 2 else int(rng.integers(1, 64))
        held = length if window is None else min(length, window)
        got = kv_cache_size(layers, kv_heads, head_dim, length, per_value, batch, window)
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


def check_ring_slots(ring_slots, seed: int = 0) -> str | None:
    """Chapter 7: after positions 0 … length − 1 went into a ring of `window` slots (position p in slot
    p mod window), the position each slot holds, in slot order."""
    for case in range(CASES):
        gen = _generator(seed, case)
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


def check_decode_step(decode_step, seed: int = 0) -> str | None:
    """Chapter 7: one cached step: append k_new, v_new to the cache, attend with the single query over all."""
    for case in range(CASES):
        gen = _generator(seed, case)
        B, H, S, d = _sizes(gen, 4, 5)
        q, k_new, v_new = (torch.randn(B, H, 1, d, generator=gen, dtype=torch.float64) for _ in range(3))
        k_cache, v_cache = (torch.randn(B, H, S, d, generator=gen, dtype=torch.float64) for _ in range(2))
        got = decode_step(q, k_new, v_new, k_cache.clone(), v_cache.clone())
        if not isinstance(got, tuple | list) or len(got) != 3:
            return "return three things: (output (B, H, 1, d_v), keys (B, H, S + 1, d_k), values (B, H, S + 1, d_v))"
        output, keys, values = (torch.as_tensor(part) for part in got)
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



# Shared feedback for tensors and arrays.

def _as_array(got) -> np.ndarray:
    return got.detach().double().numpy() if isinstance(got, torch.Tensor) else np.asarray(got, dtype=np.float64)


def _value_problem(got, expected, what: str, atol: float = 1e-5) -> str | None:
    """None when `got` equals `expected` (shape, then values), else where they first differ."""
    if problem := _shape_problem(got, tuple(expected.shape), what):
        return problem
    got, expected = _as_array(got), _as_array(expected)
    wrong = np.argwhere(~np.isclose(got, expected, atol=atol, rtol=1e-4))
    if len(wrong) == 0:
        return None
    at = tuple(int(i) for i in wrong[0])
    return f"{what}{list(at)} is {got[at]:.4f}, expected {expected[at]:.4f}"


def _matches(got, expected, atol: float = 1e-5) -> bool:
    try:
        return tuple(got.shape) == tuple(expected.shape) and np.allclose(_as_array(got), _as_array(expected), atol=atol)
    except (AttributeError, TypeError, ValueError):
        return False


def check_encode(encode_by_hand, seed: int = 0) -> str | None:
    """Chapter 1: a sentence and its vocabulary -> the token ids (T,), one per word, commas dropped."""
    rng = np.random.default_rng([seed, 11])
    for _ in range(CASES):
        sentence = ", ".join(" ".join(rng.choice(WORDS, size=rng.integers(1, 5))) for _ in range(rng.integers(1, 3)))
        vocab = build_vocab(" ".join(WORDS))
        got, expected = encode_by_hand(sentence, vocab), encode(sentence, vocab)
        if not isinstance(got, torch.Tensor) or got.dtype != torch.long:
            return f"return a torch.long tensor (what nn.Embedding takes), yours is {getattr(got, 'dtype', type(got).__name__)}"
        if problem := _shape_problem(got, tuple(expected.shape), f"the ids of {sentence!r}"):
            return problem + " (one id per word; commas are not words)"
        for position, (mine, right) in enumerate(zip(got.tolist(), expected.tolist(), strict=True)):
            if mine != right:
                word = words(sentence)[position]
                return f"in {sentence!r}, word {position} ({word!r}) should get id vocab[{word!r}] = {right}, yours is {mine}"
    return None


def check_embed(embed_by_hand, seed: int = 0) -> str | None:
    """Chapter 1: ids (T,) and a table (V, d) -> the embeddings (T, d), row ids[t] of the table."""
    for case in range(CASES):
        gen = _generator(seed, case)
        V, d, T = _sizes(gen, 3, 9)
        table = torch.randn(V, d, generator=gen)
        ids = torch.randint(0, V, (T,), generator=gen)
        got = embed_by_hand(ids, table)
        expected = table[ids]
        if problem := _value_problem(got, expected, f"the embeddings of ids {ids.tolist()} ({V} × {d} table)"):
            return problem + "; position t gets row ids[t] of the table"
    return None


def check_attention_weights(attention_weights_by_hand, seed: int = 0) -> str | None:
    """Chapter 2: q (T, d_k), k (S, d_k) -> softmax(Q Kᵀ / √d_k), (T, S), each row summing to 1."""
    for case in range(CASES):
        gen = _generator(seed, case)
        T, S, d_k = _sizes(gen, 3, 7)
        q, k = torch.randn(T, d_k, generator=gen) * 2, torch.randn(S, d_k, generator=gen) * 2
        got = attention_weights_by_hand(q, k)
        expected = torch.softmax(q @ k.T / math.sqrt(d_k), dim=-1)
        if _matches(got, expected):
            continue
        if _matches(got, torch.softmax(q @ k.T, dim=-1)):
            return f"the scores are not scaled: divide Q Kᵀ by √d_k = {math.sqrt(d_k):.3f} before the softmax"
        if _matches(got, torch.softmax(q @ k.T / math.sqrt(d_k), dim=0)):
            return "the softmax runs over the queries (dim 0); each query's weights over the keys must sum to 1 (dim -1)"
        if _matches(got, q @ k.T / math.sqrt(d_k)):
            return "these are the scaled scores: the weights are their softmax over the keys"
        return _value_problem(got, expected, f"the weights for T={T}, S={S}, d_k={d_k}: row") or "wrong weights"
    return None


def check_self_attention(self_attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 2: x (T, d_in) and W_q, W_k (d_in, d_k), W_v (d_in, d_v) -> context vectors (T, d_v)."""
    for case in range(CASES):
        gen = _generator(seed, case)
        T, d_in, d_k, d_v = _sizes(gen, 4, 6)
        x = torch.randn(T, d_in, generator=gen)
        W_q, W_k = torch.randn(d_in, d_k, generator=gen), torch.randn(d_in, d_k, generator=gen)
        W_v = torch.randn(d_in, d_v, generator=gen)
        got = self_attention_by_hand(x, W_q, W_k, W_v)
        expected, _ = scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v)
        if _matches(got, expected):
            continue
        if _matches(got, scaled_dot_product_attention(x @ W_q, x @ W_k, x)[0]):
            return "the values are the inputs themselves: project them with W_v first (v = x @ W_v)"
        if _matches(got, scaled_dot_product_attention(x @ W_q, x @ W_k, x @ W_v, scale=1 / math.sqrt(d_in))[0]):
            return f"you scaled by √d_in = √{d_in}; the scale is √d_k = √{d_k}, the width of the queries and keys"
        return _value_problem(got, expected, f"the context vectors for T={T}, d_in={d_in}, d_k={d_k}, d_v={d_v}: row") \
            or "wrong context vectors"
    return None


def check_merge_heads(merge_heads_by_hand, seed: int = 0) -> str | None:
    """Chapter 3: (B, H, T, d) -> (B, T, H·d), the inverse of split_heads: head h fills columns h·d … (h+1)·d − 1."""
    for case in range(CASES):
        gen = _generator(seed, case)
        B, H, T, d = _sizes(gen, 4, 5)
        x = torch.randn(B, H, T, d, generator=gen)
        got = merge_heads_by_hand(x)
        if problem := _shape_problem(got, (B, T, H * d), f"merging (B, H, T, d) = {tuple(x.shape)}"):
            return problem
        expected = x.transpose(1, 2).reshape(B, T, H * d)
        if not torch.equal(torch.as_tensor(got), expected):
            return (f"columns {d}..{2 * d - 1} of position 0 should hold head 1's vector x[0, 1, 0]; swap H and T "
                    f"back first (transpose(1, 2)), then reshape (a transpose needs .reshape, not .view)")
    return None


def check_mask_to_sdpa(mask_to_sdpa, seed: int = 0) -> str | None:
    """Chapter 3: nn.MultiheadAttention's boolean attn_mask (T, S) and key_padding_mask (B, S), True =
    blocked, -> one boolean (B, 1, T, S) mask for F.scaled_dot_product_attention, True = may attend."""
    for case in range(CASES):
        gen = _generator(seed, case)
        B, T, S = _sizes(gen, 3, 6)
        attn_mask = torch.rand(T, S, generator=gen) < 0.3
        key_padding_mask = torch.rand(B, S, generator=gen) < 0.3
        got = mask_to_sdpa(attn_mask, key_padding_mask)
        if problem := _shape_problem(got, (B, 1, T, S), f"the mask for B={B}, T={T}, S={S}"):
            return problem + " (batch, a length-1 head axis that broadcasts, queries, keys)"
        if problem := _boolean_problem(got):
            return problem
        expected = ~(attn_mask[None, None] | key_padding_mask[:, None, None, :])
        if torch.equal(got, ~expected):
            return "the convention is flipped: nn.MultiheadAttention's True means blocked, SDPA's True means may attend"
        for b, _, t, s in torch.nonzero(got != expected).tolist():
            why = "attn_mask" if attn_mask[t, s] else "key_padding_mask" if key_padding_mask[b, s] else None
            if why:
                return f"batch {b}: query {t} may attend to key {s} in your mask, but {why} blocks it"
            return f"batch {b}: query {t} may not attend to key {s} in your mask, though neither mask blocks it"
    return None


def check_cross_attention(cross_attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 4: decoder states (T, E) ask, encoder states (S, E) answer: W_q on the decoder, W_k and W_v
    on the encoder -> (T, d_v)."""
    for case in range(CASES):
        gen = _generator(seed, case)
        T, S, E, d_k, d_v = _sizes(gen, 5, 6)
        target, source = torch.randn(T, E, generator=gen), torch.randn(S, E, generator=gen)
        W_q, W_k, W_v = (torch.randn(E, n, generator=gen) for n in (d_k, d_k, d_v))
        got = cross_attention_by_hand(target, source, W_q, W_k, W_v)
        expected, _ = scaled_dot_product_attention(target @ W_q, source @ W_k, source @ W_v)
        if _matches(got, expected):
            continue
        if T != S and _shape_problem(got, (S, d_v), "") is None:
            return (f"your output has one row per source position ({S}); cross-attention gives one per target "
                    f"position ({T}): the queries come from the decoder (target)")
        if _matches(got, scaled_dot_product_attention(target @ W_q, target @ W_k, target @ W_v)[0]):
            return "that is self-attention over the target: the keys and values come from the encoder (source)"
        return _value_problem(got, expected, f"the output for T={T}, S={S}: row") or "wrong output"
    return None


def check_padded_attention(padded_attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 4: q (B, T, d), k (B, S, d), v (B, S, d_v) and lengths (B,) -> (B, T, d_v), no key beyond a
    sequence's length attended."""
    for case in range(CASES):
        gen = _generator(seed, case)
        B, T, S, d = _sizes(gen, 4, 6)
        q, k, v = torch.randn(B, T, d, generator=gen), torch.randn(B, S, d, generator=gen), torch.randn(B, S, d, generator=gen)
        lengths = torch.randint(1, S + 1, (B,), generator=gen)
        got = padded_attention_by_hand(q, k, v, lengths)
        mask = (torch.arange(S) < lengths[:, None])[:, None, :]  # (B, 1, S)
        expected, _ = scaled_dot_product_attention(q, k, v, mask)
        if _matches(got, expected):
            continue
        if _matches(got, scaled_dot_product_attention(q, k, v)[0]):
            return f"the padding is attended: with lengths {lengths.tolist()}, keys at or beyond a length must get weight 0"
        if _matches(got, scaled_dot_product_attention(q, k, v, ~mask)[0]):
            return "the mask is flipped: the real tokens (positions below the length) are the ones to attend"
        return _value_problem(got, expected, f"the output with lengths {lengths.tolist()} at") or "wrong output"
    return None


def check_offset_causal_mask(causal_mask_by_hand, seed: int = 0) -> str | None:
    """Chapter 5: T queries, the last T of S positions -> boolean (T, S), query i sees keys 0 … S − T + i."""
    rng = np.random.default_rng([seed, 5])
    for _ in range(CASES):
        S = int(rng.integers(1, 9))
        T = int(rng.integers(1, S + 1))
        got = causal_mask_by_hand(T, S)
        if problem := _shape_problem(got, (T, S), f"the mask for T={T}, S={S}"):
            return problem
        if problem := _boolean_problem(got):
            return problem
        expected = causal_mask(T, S)
        if torch.equal(got, expected):
            continue
        if torch.equal(got, torch.ones(T, S, dtype=torch.bool).tril()):
            return (f"your triangle starts at the top left (as is_causal=True does): with T={T} of S={S}, query 0 "
                    f"is position {S - T} and sees keys 0..{S - T}")
        i, j = torch.nonzero(got != expected).tolist()[0]
        if got[i, j]:
            return f"T={T}, S={S}: query {i} is position {S - T + i} and must not see key {j}, which comes after it"
        return f"T={T}, S={S}: query {i} is position {S - T + i} and must see key {j}"
    return None


def check_causal_attention(causal_attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 5: q, k (T, d_k), v (T, d_v) -> (T, d_v), each position attending to itself and earlier ones."""
    for case in range(CASES):
        gen = _generator(seed, case)
        T, d_k, d_v = _sizes(gen, 3, 7)
        T += 1  # at least two positions: with one, every mask agrees
        q, k, v = torch.randn(T, d_k, generator=gen), torch.randn(T, d_k, generator=gen), torch.randn(T, d_v, generator=gen)
        got = causal_attention_by_hand(q, k, v)
        expected, weights = scaled_dot_product_attention(q, k, v, causal_mask(T))
        if _matches(got, expected):
            continue
        full = torch.softmax(q @ k.T / math.sqrt(d_k), dim=-1)
        if _matches(got, (full * causal_mask(T)) @ v):
            return "you masked after the softmax: each row's weights no longer sum to 1; set blocked scores to -inf before it"
        if _matches(got, full @ v):
            return "nothing is masked: position 0 sees every later position"
        return _value_problem(got, expected, f"the output for T={T}: row") or "wrong output"
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
        if problem := _shape_problem(got, expected.shape, "the output"):
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
        if problem := _shape_problem(weight, expected.shape, "the weight"):
            return problem
        if E > 1 and H * K > 1 and np.allclose(weight, kernel.reshape(H * K, E)):
            return "a reshape to (H·d_k, E) mixes up the axes: flatten (E, H, d_k) to (E, H·d_k), then transpose"
        if not np.allclose(weight, expected):
            return f"weight row h·d_k + k should be kernel[:, h, k] (E={E}, H={H}, d_k={K})"
        if problem := _shape_problem(new_bias, (H * K,), "the bias"):
            return problem
        if not np.allclose(new_bias, bias.reshape(-1)):
            return "bias entry h·d_k + k should be bias[h, k]"
    return None


def check_merge_partials(merge_partials, seed: int = 0) -> str | None:
    """Chapter 8: two blocks' (m, l, acc) for one query, acc = Σ exp(s − m) v, -> the (m, l, acc) of both."""
    for case in range(CASES):
        gen = _generator(seed, case)
        n_a, n_b, d = _sizes(gen, 3, 6)
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
        if problem := _value_problem(acc, expected[2], "the merged accumulator", atol=1e-9):
            return problem + ": rescale each block's acc by exp(m_x − m), like its sum"
    return None


def check_tiled_attention(tiled_attention_by_hand, seed: int = 0) -> str | None:
    """Chapter 8: q (T, d), k, v (S, d) read in key blocks of `block` -> softmax(Q Kᵀ / √d) V, (T, d)."""
    for case in range(CASES):
        gen = _generator(seed, case)
        T, S, d = _sizes(gen, 3, 9)
        block = int(torch.randint(1, 5, (1,), generator=gen))
        q, k, v = (torch.randn(n, d, generator=gen, dtype=torch.float64) for n in (T, S, S))
        got = tiled_attention_by_hand(q, k, v, block)
        expected, _ = scaled_dot_product_attention(q, k, v)
        if _matches(got, expected, atol=1e-9):
            continue
        blocks = [scaled_dot_product_attention(q, k[i:i + block], v[i:i + block])[0] for i in range(0, S, block)]
        if len(blocks) > 1 and _matches(got, sum(blocks) / len(blocks), atol=1e-9):
            return "you averaged the blocks' outputs; blocks weigh by their share of the softmax sum: keep m, l, acc"
        return _value_problem(got, expected, f"the output for T={T}, S={S}, block {block}: row", atol=1e-9) or "wrong output"
    return None


# Chapter 9


def rope_half_reference(x: torch.Tensor, direction: int = 1) -> torch.Tensor:
    """RoPE with Hugging Face's pairing: feature i with feature i + d/2, turned by direction · m·θ_i."""
    d = x.shape[-1]
    angles = direction * rope_angles(x.shape[-2], d)  # (T, d/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    a, b = x[..., :d // 2], x[..., d // 2:]  # (..., T, d/2) each
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)  # (..., T, d)


def check_rope_half(rope_half, seed: int = 0) -> str | None:
    """Chapter 9: x (T, d) of positions 0 … T − 1, feature i paired with i + d/2, turned by m·10000^(−2i/d)."""
    for case in range(CASES):
        gen = _generator(seed, case)
        T, half = _sizes(gen, 2, 9)
        x = torch.randn(T + 1, 2 * half, generator=gen, dtype=torch.float64)  # (T, d)
        got, expected = rope_half(x.clone()), rope_half_reference(x)
        if problem := _shape_problem(got, expected.shape, "the rotated x"):
            return problem
        got = torch.as_tensor(got, dtype=torch.float64)
        if torch.allclose(got, expected, atol=1e-6):
            continue
        if torch.allclose(got, x, atol=1e-6):
            return "your function returns x unchanged: position m must turn each pair by the angle m·θ_i"
        if half > 1 and torch.allclose(got, apply_rope(x), atol=1e-6):
            return ("that is RoPE on adjacent pairs (2i, 2i + 1), this book's layout; here feature i pairs with "
                    "feature i + d/2: rotate x[:, :d/2] against x[:, d/2:]")
        if not torch.allclose(got[0], x[0], atol=1e-6):
            return "position 0 should not be turned at all (its angle is 0·θ_i = 0)"
        if torch.allclose(got, rope_half_reference(x, direction=-1), atol=1e-6):
            return "each pair turns the wrong way: (a, b) -> (a cos − b sin, a sin + b cos) for the angle m·θ_i"
        feature = int((got - expected).abs().amax(dim=0).argmax())
        return (f"for d = {x.shape[1]} feature {feature} is wrong: pair i is features (i, i + d/2), turned by "
                f"θ_i = 10000^(−2i/d) per position")
    return None


def check_previous_token_score(score_by_hand, seed: int = 0) -> str | None:
    """Chapter 9: q, k (H, T, d) -> (H,): causal softmax(q kᵀ / √d), then the mean weight of queries
    1 … T − 1 on the position just before them."""
    for case in range(CASES):
        gen = _generator(seed, case)
        H, T, d = _sizes(gen, 3, 7)
        q, k = (torch.randn(H, T + 1, d, generator=gen, dtype=torch.float64) * 2 for _ in range(2))
        got = score_by_hand(q.clone(), k.clone())
        scores = q @ k.transpose(-2, -1)  # (H, T, T)
        mask = causal_mask(T + 1)

        def score(s, m=mask):
            weights = torch.softmax(s.masked_fill(~m, float("-inf")), dim=-1)  # (H, T, T)
            return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)  # (H,)

        expected = score(scores / math.sqrt(d))
        if problem := _shape_problem(got, expected.shape, "the scores"):
            return problem
        got = torch.as_tensor(got, dtype=torch.float64)
        if torch.allclose(got, expected, atol=1e-9):
            continue
        if torch.allclose(got, score(scores / math.sqrt(d), torch.ones_like(mask)), atol=1e-9):
            return "the weights need the causal mask: a query may not look at later positions"
        if d > 1 and torch.allclose(got, score(scores), atol=1e-9):
            return "the scores are not scaled: divide q · k by sqrt(d) before the softmax"
        weights = torch.softmax((scores / math.sqrt(d)).masked_fill(~mask, float("-inf")), dim=-1)
        if torch.allclose(got, weights.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1) / (T + 1), atol=1e-9):
            return f"you divide by all {T + 1} queries; query 0 has no previous position: average over the {T} others"
        if torch.allclose(got, weights.diagonal(dim1=-2, dim2=-1)[:, 1:].mean(-1), atol=1e-9):
            return "you average each query's weight on itself; the previous position is one to the left"
        return (f"for {H} heads and T = {T + 1} your scores are {[round(v, 3) for v in got.tolist()]}, expected "
                f"{[round(v, 3) for v in expected.tolist()]}")
    return None


def check_sinusoidal_shift(shift_by_hand, seed: int = 0) -> str | None:
    """Chapter 9: (offset, width) -> M (width, width) with PE[p + offset] = M @ PE[p], one rotation per pair."""
    for case in range(CASES):
        gen = _generator(seed, case)
        offset, half = _sizes(gen, 2, 12)
        width = 2 * half
        got, expected = shift_by_hand(offset, width), sinusoidal_shift(offset, width)
        if problem := _shape_problem(got, expected.shape, f"M for offset {offset}, width {width}"):
            return problem
        got = torch.as_tensor(got, dtype=torch.float32)
        if torch.allclose(got, expected, atol=1e-5):
            continue
        if torch.allclose(got, expected.T, atol=1e-5):
            return (f"your M moves back by {offset} positions, not forward: with PE[p] = (sin, cos) per pair, "
                    "PE[p + k] = [[cos kω, sin kω], [−sin kω, cos kω]] @ PE[p]")
        pe = sinusoidal_encoding(offset + 8, width)  # (T, width)
        moved = pe[:8] @ got.T  # (8, width): M @ PE[p] for p = 0 … 7
        pair = int((moved - pe[offset:offset + 8]).abs().amax(dim=0).argmax()) // 2
        return (f"for offset {offset} and width {width}, M @ PE[p] differs from PE[p + {offset}] in pair {pair}: its "
                f"block turns by offset · ω_{pair}, ω_i = 10000^(−2i/width), and M is zero off the 2×2 blocks")
    return None


CHECKS: dict[str, Check] = {
    "ch1.vocab": Check(check_vocab, "build_vocab_by_hand"),
    "ch1.encode": Check(check_encode, "encode_by_hand"),
    "ch1.embed": Check(check_embed, "embed_by_hand"),
    "ch2.attention": Check(check_attention, "attention_by_hand"),
    "ch2.attention_weights": Check(check_attention_weights, "attention_weights_by_hand"),
    "ch2.self_attention": Check(check_self_attention, "self_attention_by_hand"),
    "ch3.split_heads": Check(check_split_heads, "split_heads_by_hand"),
    "ch3.merge_heads": Check(check_merge_heads, "merge_heads_by_hand"),
    "ch3.mask_to_sdpa": Check(check_mask_to_sdpa, "mask_to_sdpa"),
    "ch4.padding_mask": Check(check_padding_mask, "padding_mask_by_hand"),
    "ch4.cross_attention": Check(check_cross_attention, "cross_attention_by_hand"),
    "ch4.padded_attention": Check(check_padded_attention, "padded_attention_by_hand"),
    "ch5.causal_mask": Check(check_causal_mask, "causal_mask_by_hand"),
    "ch5.offset_causal_mask": Check(check_offset_causal_mask, "offset_causal_mask_by_hand"),
    "ch5.causal_attention": Check(check_causal_attention, "causal_attention_by_hand"),
    "ch6.keras_projection": Check(check_keras_projection, "keras_projection"),
    "ch6.keras_output": Check(check_keras_output, "keras_output"),
    "ch6.kernel_to_linear": Check(check_kernel_to_linear, "kernel_to_linear"),
    "ch7.cache_size": Check(check_cache_size, "kv_cache_size"),
    "ch7.ring_slots": Check(check_ring_slots, "ring_slots"),
    "ch7.decode_step": Check(check_decode_step, "decode_step"),
    "ch8.running_max_and_sum": Check(check_running_max_and_sum, "running_max_and_sum"),
    "ch8.merge_partials": Check(check_merge_partials, "merge_partials"),
    "ch8.tiled_attention": Check(check_tiled_attention, "tiled_attention_by_hand"),
    "ch9.rope_half": Check(check_rope_half, "rope_half"),
    "ch9.previous_token_score": Check(check_previous_token_score, "previous_token_score_by_hand"),
    "ch9.sinusoidal_shift": Check(check_sinusoidal_shift, "shift_by_hand"),
}
