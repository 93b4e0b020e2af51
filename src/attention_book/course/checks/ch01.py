"""Checks of chapter 1's graded exercises (tokens and embeddings); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import numpy as np
import torch

from ...tokens import build_vocab, encode, words
from .common import case_generator, CASES, Check, shape_problem, sizes, value_problem, WORDS


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


def check_encode(encode_by_hand, seed: int = 0) -> str | None:
    """Chapter 1: a sentence and its vocabulary -> the token ids (T,), one per word, commas dropped."""
    rng = np.random.default_rng([seed, 11])
    for _ in range(CASES):
        sentence = ", ".join(" ".join(rng.choice(WORDS, size=rng.integers(1, 5))) for _ in range(rng.integers(1, 3)))
        vocab = build_vocab(" ".join(WORDS))
        got, expected = encode_by_hand(sentence, vocab), encode(sentence, vocab)
        if not isinstance(got, torch.Tensor) or got.dtype != torch.long:
            return f"return a torch.long tensor (what nn.Embedding takes), yours is {getattr(got, 'dtype', type(got).__name__)}"
        if problem := shape_problem(got, tuple(expected.shape), f"the ids of {sentence!r}"):
            return problem + " (one id per word; commas are not words)"
        for position, (mine, right) in enumerate(zip(got.tolist(), expected.tolist(), strict=True)):
            if mine != right:
                word = words(sentence)[position]
                return f"in {sentence!r}, word {position} ({word!r}) should get id vocab[{word!r}] = {right}, yours is {mine}"
    return None


def check_embed(embed_by_hand, seed: int = 0) -> str | None:
    """Chapter 1: ids (T,) and a table (V, d) -> the embeddings (T, d), row ids[t] of the table."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        V, d, T = sizes(gen, 3, 9)
        table = torch.randn(V, d, generator=gen)
        ids = torch.randint(0, V, (T,), generator=gen)
        got = embed_by_hand(ids, table)
        expected = table[ids]
        if problem := value_problem(got, expected, f"the embeddings of ids {ids.tolist()} ({V} × {d} table)"):
            return problem + "; position t gets row ids[t] of the table"
    return None


CHECKS: dict[str, Check] = {
    "ch1.vocab": Check(check_vocab, "build_vocab_by_hand",
          forbidden=("attention_book.tokens.build_vocab",)),
    "ch1.encode": Check(check_encode, "encode_by_hand",
          forbidden=("attention_book.tokens.encode",)),
    "ch1.embed": Check(check_embed, "embed_by_hand",
          forbidden=("torch.nn.functional.embedding",)),
}
