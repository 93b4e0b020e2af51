"""The toy sentence, its vocabulary and its token ids (chapter 1)."""

import torch

SENTENCE = "Life is short, eat dessert first"


def words(sentence: str) -> list[str]:
    """Split a sentence into words, dropping commas (chapter 1)."""
    return sentence.replace(",", "").split()


def build_vocab(sentence: str) -> dict[str, int]:
    """Map each distinct word to its rank in sorted order (chapter 1)."""
    return {word: i for i, word in enumerate(sorted(set(words(sentence))))}


def encode(sentence: str, vocab: dict[str, int]) -> torch.Tensor:
    """Token ids of a sentence, shape (T,) (chapter 1)."""
    unknown = [w for w in words(sentence) if w not in vocab]
    if unknown:
        raise KeyError(f"words not in the vocabulary: {unknown}; known: {sorted(vocab)}")
    return torch.tensor([vocab[w] for w in words(sentence)], dtype=torch.long)  # long even when empty
