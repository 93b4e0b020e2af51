"""The package's attention equals PyTorch's, and bad input fails loudly (chapter 2)."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_book import SelfAttention, scaled_dot_product_attention
from attention_book.attention import attention_weights

SETTINGS = settings(max_examples=60, deadline=None)


@st.composite
def attention_case(draw):
    """Random batch dims, lengths, widths, seed and an optional boolean or float mask."""
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    t, s = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    d_k, d_v = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    q = torch.randn(*batch, t, d_k, generator=gen, dtype=torch.float64)
    k = torch.randn(*batch, s, d_k, generator=gen, dtype=torch.float64)
    v = torch.randn(*batch, s, d_v, generator=gen, dtype=torch.float64)
    kind = draw(st.sampled_from(["none", "bool", "float"]))
    # a mask that broadcasts: either the full score shape or just (T, S)
    mask_shape = (*batch, t, s) if draw(st.booleans()) else (t, s)
    mask = None
    if kind == "bool":
        mask = torch.rand(mask_shape, generator=gen) < 0.7
        mask[..., 0] = True  # no row fully blocked here; that case has its own test
    elif kind == "float":
        mask = torch.randn(mask_shape, generator=gen, dtype=torch.float64)
    return q, k, v, mask


@SETTINGS
@given(attention_case())
def test_equals_torch_sdpa(case):
    q, k, v, mask = case
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected)
    # the weights are PyTorch's too: attending over identity values, SDPA returns its weights row by row
    identity = torch.eye(k.shape[-2], dtype=k.dtype).expand(*k.shape[:-1], k.shape[-2])  # (..., S, S)
    torch.testing.assert_close(weights, F.scaled_dot_product_attention(q, k, identity, attn_mask=mask))
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)))


@SETTINGS
@given(attention_case(), st.floats(0.05, 3.0))
def test_custom_scale(case, scale):
    q, k, v, mask = case
    out, _ = scaled_dot_product_attention(q, k, v, mask, scale=scale)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale))


def test_weights_match_manual_formula():
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(4, 5, generator=gen), torch.randn(6, 5, generator=gen)
    expected = torch.softmax(q @ k.T / math.sqrt(5), dim=-1)
    torch.testing.assert_close(attention_weights(q, k), expected)


def test_fully_masked_row_gives_zeros_not_nan():
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(3, 4, generator=gen) for _ in range(3))
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False  # query 1 may see nothing
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert not torch.isnan(out).any() and not torch.isnan(weights).any()
    assert torch.equal(weights[1], torch.zeros(3)) and torch.equal(out[1], torch.zeros(4))
    # the other rows are untouched by the special case
    torch.testing.assert_close(out[[0, 2]], F.scaled_dot_product_attention(q, k, v, attn_mask=mask)[[0, 2]])
    # the same through a float mask of -inf
    float_mask = torch.zeros(3, 3).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, float_mask)[0], out)


def test_fully_masked_row_has_zero_gradient_not_nan():
    q = torch.randn(2, 4, requires_grad=True)
    k, v = torch.randn(3, 4), torch.randn(3, 4)
    mask = torch.tensor([[True, True, False], [False, False, False]])
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.equal(q.grad[1], torch.zeros(4))


@pytest.mark.parametrize(
    "shapes, mask_shape, message",
    [
        (((2, 5, 4), (2, 6, 3), (2, 6, 7)), None, r"query and key widths differ: query \(2, 5, 4\) has d_k=4, key \(2, 6, 3\)"),
        (((5, 4), (6, 4), (7, 2)), None, r"key and value lengths differ: key \(6, 4\) has S=6, value \(7, 2\) has S=7"),
        (((2, 5, 4), (3, 6, 4), (3, 6, 2)), None, r"batch dimensions do not broadcast: query \(2, 5, 4\), key \(3, 6, 4\)"),
        (((5, 4), (6, 4), (6, 2)), (6, 5), r"mask of shape \(6, 5\) does not broadcast to the scores' shape \(5, 6\)"),
        (((5, 4), (6, 4), (6, 2)), (3, 5, 6), r"mask of shape \(3, 5, 6\) does not broadcast to the scores' shape \(5, 6\)"),
        (((4,), (6, 4), (6, 2)), None, r"query must have at least 2 dimensions .* got shape \(4,\)"),
    ],
)
def test_bad_shapes_name_the_shapes(shapes, mask_shape, message):
    q, k, v = (torch.zeros(s) for s in shapes)
    mask = None if mask_shape is None else torch.ones(mask_shape, dtype=torch.bool)
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(q, k, v, mask)


def test_integer_mask_is_refused():
    q = torch.zeros(2, 3)
    with pytest.raises(TypeError, match="got dtype torch.int64"):
        scaled_dot_product_attention(q, q, q, torch.ones(2, 2, dtype=torch.long))


def test_self_attention_module_matches_step_by_step():
    torch.manual_seed(0)
    sa = SelfAttention(5, 3, 4)
    x = torch.randn(2, 6, 5)
    q, k, v = x @ sa.W_query, x @ sa.W_key, x @ sa.W_value
    expected = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(3), dim=-1) @ v
    torch.testing.assert_close(sa(x), expected)
    with pytest.raises(ValueError, match=r"x of shape \(6, 4\) has width 4, the module expects d_in=5"):
        sa(torch.zeros(6, 4))
