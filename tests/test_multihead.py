"""Multi-head attention equals nn.MultiheadAttention, and its three forms agree (chapters 3-4)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import attention_book as ab

SETTINGS = settings(max_examples=50, deadline=None)


def no_empty_rows(blocked: torch.Tensor) -> torch.Tensor:
    """Unblock key 0 so that no query is left with nothing to attend to."""
    blocked = blocked.clone()
    blocked[..., 0] = False
    return blocked


@st.composite
def mha_case(draw):
    heads, head_dim = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    batch, t, s = draw(st.integers(1, 3)), draw(st.integers(1, 6)), draw(st.integers(1, 6))
    cross = draw(st.booleans())
    kdim = draw(st.integers(1, 7)) if cross and draw(st.booleans()) else None
    vdim = draw(st.integers(1, 7)) if cross and draw(st.booleans()) else None
    seed = draw(st.integers(0, 2**31 - 1))
    attn_kind = draw(st.sampled_from([None, "bool", "float", "bool-per-head"]))
    padding_kind = draw(st.sampled_from([None, "bool", "float"]))
    return dict(heads=heads, E=heads * head_dim, batch=batch, t=t, s=s if cross else t, cross=cross, kdim=kdim,
                vdim=vdim, seed=seed, attn_kind=attn_kind, padding_kind=padding_kind,
                batch_first=draw(st.booleans()), bias=draw(st.booleans()))


def build(case):
    gen = torch.Generator().manual_seed(case["seed"])
    torch.manual_seed(case["seed"])
    mha = nn.MultiheadAttention(case["E"], case["heads"], bias=case["bias"], kdim=case["kdim"], vdim=case["vdim"],
                                batch_first=case["batch_first"], dtype=torch.float64).eval()
    B, T, S, H = case["batch"], case["t"], case["s"], case["heads"]
    query = torch.randn(B, T, case["E"], generator=gen, dtype=torch.float64)
    key = torch.randn(B, S, case["kdim"] or case["E"], generator=gen, dtype=torch.float64) if case["cross"] else query
    value = torch.randn(B, S, case["vdim"] or case["E"], generator=gen, dtype=torch.float64) if case["cross"] else query
    attn_mask = {
        None: None,
        "bool": no_empty_rows(torch.rand(T, S, generator=gen) < 0.3),
        "float": torch.randn(T, S, generator=gen, dtype=torch.float64),
        "bool-per-head": no_empty_rows(torch.rand(B * H, T, S, generator=gen) < 0.3),
    }[case["attn_kind"]]
    padding = {
        None: None,
        "bool": no_empty_rows(torch.rand(B, S, generator=gen) < 0.3),
        "float": torch.randn(B, S, generator=gen, dtype=torch.float64),
    }[case["padding_kind"]]
    return mha, query, key, value, attn_mask, padding


@SETTINGS
@given(mha_case())
@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask and attn_mask is deprecated")
def test_equals_torch_multihead_attention(case):
    mha, query, key, value, attn_mask, padding = build(case)
    ours = ab.MultiHeadAttention.from_torch(mha, sequence_first=not case["batch_first"])
    if case["batch_first"]:
        expected, expected_weights = mha(query, key, value, attn_mask=attn_mask, key_padding_mask=padding)
    else:  # PyTorch's default layout is (T, B, E)
        q, k, v = (x.transpose(0, 1) for x in (query, key, value))
        expected, expected_weights = mha(q, k, v, attn_mask=attn_mask, key_padding_mask=padding)
        expected = expected.transpose(0, 1)
    mask = ab.mask_from_torch(attn_mask, padding, num_heads=case["heads"])
    out, weights = ours(query, key if case["cross"] else None, value if case["cross"] else None, mask=mask)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights, expected_weights)
    # the fused path (no weights) gives the same output
    fast, none = ours(query, key if case["cross"] else None, value if case["cross"] else None, mask=mask,
                      need_weights=False)
    assert none is None
    torch.testing.assert_close(fast, expected)


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 7), st.integers(0, 2**31 - 1))
def test_three_forms_agree(heads, head_dim, t, seed):
    gen = torch.Generator().manual_seed(seed)
    E = d_in = heads * head_dim  # the fused form projects E -> E, split into H heads of E/H
    x = torch.randn(t, d_in, generator=gen, dtype=torch.float64)
    W_query, W_key, W_value = (torch.randn(heads, head_dim, d_in, generator=gen, dtype=torch.float64) for _ in "qkv")
    stacked = ab.stacked_multihead_attention(x, W_query, W_key, W_value)  # (H, T, d_v)

    wrapper = ab.MultiHeadAttentionWrapper(d_in, head_dim, head_dim, heads).double()
    fused = ab.MultiHeadAttention(E, heads, bias=False).double()
    with torch.no_grad():
        for h, head in enumerate(wrapper.heads):
            head.W_query.copy_(W_query[h].T)
            head.W_key.copy_(W_key[h].T)
            head.W_value.copy_(W_value[h].T)
        fused.q_proj.weight.copy_(W_query.flatten(0, 1))  # (H, d_k, d_in) -> (H·d_k, d_in)
        fused.k_proj.weight.copy_(W_key.flatten(0, 1))
        fused.v_proj.weight.copy_(W_value.flatten(0, 1))
        fused.out_proj.weight.copy_(torch.eye(E))  # W^O = I leaves the concatenation as it is
    concatenated = stacked.transpose(0, 1).flatten(1)  # (H, T, d_v) -> (T, H·d_v)
    torch.testing.assert_close(wrapper(x), concatenated)
    torch.testing.assert_close(fused(x)[0], concatenated)


@SETTINGS
@given(st.integers(0, 2**31 - 1), st.integers(2, 6), st.integers(2, 6))
def test_blocked_key_changes_nothing(seed, t, s):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    mha = ab.MultiHeadAttention(8, 2)
    query, source = torch.randn(1, t, 8, generator=gen), torch.randn(1, s, 8, generator=gen)
    blocked = int(torch.randint(s, (1,), generator=gen))
    mask = torch.rand(t, s, generator=gen) < 0.7
    mask[:, (blocked + 1) % s] = True  # every query keeps one visible key
    changed = source.clone()
    changed[0, blocked] = torch.randn(8, generator=gen) * 100
    out, _ = mha(query, source, source, mask=mask)
    out_changed, _ = mha(query, changed, changed, mask=mask)
    rows = ~mask[:, blocked]  # queries that may not see the changed key
    assert torch.equal(out[0, rows], out_changed[0, rows])
    if mask[:, blocked].any():  # ... while the ones that may, do change: the test can fail
        assert not torch.equal(out[0, ~rows], out_changed[0, ~rows])


def test_embed_dim_must_divide_into_heads():
    with pytest.raises(ValueError, match="embed_dim=10 is not divisible by num_heads=3"):
        ab.MultiHeadAttention(10, 3)


def test_bad_masks_are_named():
    mha = ab.MultiHeadAttention(8, 2)
    x = torch.zeros(2, 5, 8)
    with pytest.raises(ValueError, match=r"mask of shape \(5, 4\) does not broadcast to the scores' shape \(2, 2, 5, 5\)"):
        mha(x, mask=torch.ones(5, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask of shape \(5, 4\) does not broadcast"):
        mha(x, mask=torch.ones(5, 4, dtype=torch.bool), need_weights=False)
    with pytest.raises(TypeError, match="got dtype torch.int32"):
        mha(x, mask=torch.ones(5, 5, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"key of shape \(2, 3, 6\) has width 6, the module expects kdim=8"):
        mha(x, torch.zeros(2, 3, 6))


def test_loader_names_the_tensor_on_shape_mismatch():
    mha = nn.MultiheadAttention(8, 2)
    ours = ab.MultiHeadAttention(8, 2)
    ours.out_proj = nn.Linear(8, 4)
    with pytest.raises(ValueError, match=r"out_proj.weight: expected shape \(4, 8\), nn.MultiheadAttention has \(8, 8\)"):
        ab.multihead.load_torch_weights(ours, mha)
