"""Chapter 9: the Triton kernel equals PyTorch's attention. On a CUDA machine it runs compiled; elsewhere
the same kernel runs in Triton's interpreter (TRITON_INTERPRET=1, set by conftest.py before triton loads)."""

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton", reason="triton is published for Linux only")

from attention_book.causal import causal_mask  # noqa: E402
from attention_book.efficient import tiled_attention  # noqa: E402
from attention_book.measure import attention_tflops  # noqa: E402
from attention_book.triton_attention import (  # noqa: E402
    SHARED_MEMORY_LIMIT,
    default_config,
    shared_memory_bytes,
    triton_attention,
)

CUDA = torch.cuda.is_available()

DEVICE = "cuda" if CUDA else "cpu"
# The interpreter multiplies bfloat16 bit patterns in tl.dot (triton-lang/triton#11584): bf16 only on a GPU.
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if CUDA else [])
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def reference(q, k, v, causal):
    mask = causal_mask(q.shape[-2], k.shape[-2], device=q.device) if causal else None  # bottom-right, T <= S
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("T", "S", "d"), [(64, 64, 16), (100, 100, 32), (37, 150, 16), (130, 131, 64),
                                          (96, 200, 128)])
def test_kernel_equals_sdpa(dtype, causal, T, S, d):
    gen = torch.Generator().manual_seed(T + S + d)
    q = torch.randn(2, 3, T, d, generator=gen).to(DEVICE, dtype)
    k = torch.randn(2, 3, S, d, generator=gen).to(DEVICE, dtype)
    v = torch.randn(2, 3, S, d, generator=gen).to(DEVICE, dtype)
    blocks = {"block_q": 32, "block_k": 16} if not CUDA else {}
    out = triton_attention(q, k, v, causal, **blocks)
    assert out.dtype == dtype and out.shape == (2, 3, T, d)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(out.float(), reference(q, k, v, causal), rtol=tol, atol=tol)


@pytest.mark.skipif(not CUDA, reason="compiled kernels with the default block sizes need a CUDA GPU")
@pytest.mark.parametrize("d", [64, 128])
def test_kernel_default_blocks_on_gpu(d):
    q, k, v = (torch.randn(1, 8, 1024, d, device="cuda", dtype=torch.float16) for _ in range(3))
    for causal in (False, True):
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.testing.assert_close(triton_attention(q, k, v, causal), expected, rtol=2e-3, atol=2e-3)


def test_kernel_errors_name_the_shapes():
    q = torch.zeros(1, 2, 8, 24, device=DEVICE)
    with pytest.raises(ValueError, match="head_dim must be the same power of two .* got d_k=24, d_v=24"):
        triton_attention(q, q, q)
    q = torch.zeros(1, 2, 8, 16, device=DEVICE)
    with pytest.raises(ValueError, match=r"wants \(B, H, T, d\) inputs with equal B and H, got query \(1, 2, 8, 16\), "
                                         r"key \(2, 2, 8, 16\)"):
        triton_attention(q, torch.zeros(2, 2, 8, 16, device=DEVICE), torch.zeros(2, 2, 8, 16, device=DEVICE))
    with pytest.raises(ValueError, match="at least as many keys as queries, got T=8 > S=4"):
        triton_attention(q, q[..., :4, :], q[..., :4, :], causal=True)


def test_tflops_counts_half_the_work_under_a_causal_mask():
    full = attention_tflops(1, 8, 4096, 64, 1e-3, causal=False)
    assert full == pytest.approx(4 * 8 * 4096**2 * 64 / 1e-3 / 1e12)
    assert attention_tflops(1, 8, 4096, 64, 1e-3, causal=True) == pytest.approx(full / 2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("d", [16, 32, 64, 128, 256])
def test_default_blocks_fit_shared_memory(dtype, d):
    config = default_config(dtype, d)
    assert shared_memory_bytes(config["block_q"], config["block_k"], config["num_stages"], d, dtype) \
        <= SHARED_MEMORY_LIMIT


def test_blocks_that_cannot_work_are_refused_with_the_limit_named():
    q = torch.zeros(1, 1, 32, 256, device=DEVICE)
    with pytest.raises(ValueError, match="block_k must be a power of two of at least 16, got 24"):
        triton_attention(q, q, q, block_k=24)
    with pytest.raises(ValueError, match="block_q must be a power of two of at least 16, got 8"):
        triton_attention(q, q, q, block_q=8)
    # 128 x 64 blocks in 3 stages at head_dim 256, the old defaults: more than an H100 has, fp32 and fp16 alike
    with pytest.raises(ValueError, match=r"need about 512 KiB of shared memory, more than the 227 KiB"):
        triton_attention(q, q, q, block_q=128, block_k=64, num_stages=3)
    with pytest.raises(ValueError, match=r"need about 256 KiB of shared memory, more than the 227 KiB"):
        triton_attention(q.half(), q.half(), q.half(), block_q=128, block_k=64, num_stages=3)


@pytest.mark.skipif(not CUDA, reason="a tensor past 2**31 elements needs a GPU with about 20 GB free")
def test_offsets_past_two_to_the_31():
    """(batch, head) offsets above 2³¹ elements: 32-bit offsets would wrap and read the wrong head."""
    T, d = 16384, 128
    heads = 2**31 // (T * d) + 1  # the last head starts past element 2³¹
    q, k, v = (torch.randn(1, heads, T, d, device="cuda", dtype=torch.float16) for _ in range(3))
    out = triton_attention(q, k, v)
    last = F.scaled_dot_product_attention(q[:, -1:], k[:, -1:], v[:, -1:])
    torch.testing.assert_close(out[:, -1:], last, rtol=2e-3, atol=2e-3)


# The backward kernels (issue 32): gradients equal to chapter 9's PyTorch backward (tiled_attention, proven by
# gradcheck in test_efficient.py). Tiny shapes: the interpreter runs every program instance in Python.
GRAD_TOLERANCE = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("T", "S"), [(32, 32), (37, 50), (20, 45)])
def test_backward_kernels_equal_the_pytorch_backward(dtype, causal, T, S):
    gen = torch.Generator().manual_seed(T * S)
    q, k, v = (torch.randn(1, 2, n, 16, generator=gen).to(DEVICE, dtype).requires_grad_() for n in (T, S, S))
    d_out = torch.randn(1, 2, T, 16, generator=gen).to(DEVICE, dtype)
    got = torch.autograd.grad(triton_attention(q, k, v, causal, block_q=16, block_k=16), (q, k, v), d_out)
    # the reference in float32 from the same 16-bit inputs
    ref_inputs = [t.detach().float().requires_grad_() for t in (q, k, v)]
    expected = torch.autograd.grad(tiled_attention(*ref_inputs, causal, 16, 16), ref_inputs, d_out.float())
    tol = GRAD_TOLERANCE[dtype]
    for name, g, e in zip("qkv", got, expected, strict=True):
        assert g.dtype == dtype
        torch.testing.assert_close(g.float(), e, rtol=tol, atol=tol, msg=f"d{name}")


def test_half_precision_error_at_most_twice_sdpas():
    """FlashAttention's criterion, as for the PyTorch loop: the kernel's fp16 error against a float64
    reference is at most twice SDPA's fp16 error (plus a floor); its statistics are float32."""
    gen = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(1, 2, n, 32, generator=gen, dtype=torch.float64) for n in (45, 70, 70))
    for causal in (False, True):
        mask = causal_mask(45, 70) if causal else None
        reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        low = [t.to(DEVICE, torch.float16) for t in (q, k, v)]
        sdpa = F.scaled_dot_product_attention(*low, attn_mask=None if mask is None else mask.to(DEVICE))
        out = triton_attention(*low, causal, block_q=16, block_k=16)
        error = (out.double().cpu() - reference).abs().max()
        assert error <= 2 * (sdpa.double().cpu() - reference).abs().max() + 1e-4
