"""The toy vocabulary (chapter 1) and the √d_k measurements (chapter 2)."""

import pytest
import torch

from attention_book import SENTENCE, build_vocab, encode
from attention_book.scaling import dot_product_variance, softmax_jacobian_norm, softmax_saturation


def test_vocabulary_and_ids():
    vocab = build_vocab(SENTENCE)
    assert vocab == {"Life": 0, "dessert": 1, "eat": 2, "first": 3, "is": 4, "short": 5}
    assert torch.equal(encode(SENTENCE, vocab), torch.tensor([0, 4, 5, 2, 1, 3]))


def test_unknown_word_is_named():
    with pytest.raises(KeyError, match="'cake'"):
        encode("eat cake", build_vocab(SENTENCE))


def test_variance_grows_like_d_k():
    gen = torch.Generator().manual_seed(0)
    for d_k in (4, 64, 256):
        assert dot_product_variance(d_k, 20_000, gen) == pytest.approx(d_k, rel=0.1)


def test_jacobian_norm_matches_autograd():
    scores = torch.randn(5, dtype=torch.float64)
    jac = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, -1), scores)
    assert softmax_jacobian_norm(torch.softmax(scores, -1)).item() == pytest.approx(jac.norm().item())


def test_unscaled_softmax_saturates_and_scaled_does_not():
    gen = torch.Generator().manual_seed(0)
    max_unscaled, grad_unscaled = softmax_saturation(512, 16, 500, scaled=False, generator=gen)
    max_scaled, grad_scaled = softmax_saturation(512, 16, 500, scaled=True, generator=gen)
    assert max_unscaled > 0.9 and max_scaled < 0.6
    assert grad_unscaled < grad_scaled / 3
