"""Chapter 9's tiled attention as Triton kernels for CUDA GPUs: FlashAttention's forward pass, and its
backward as a dK/dV kernel (key blocks outer, as in FlashAttention-2) and a separate dQ kernel (query
blocks outer): a second pass for dQ, as Triton's fused-attention tutorial makes (there, a second loop in
the same kernel), in place of FlashAttention-2's atomic adds into dQ.

Each program instance owns one block of queries of one (batch, head) and walks over the key blocks with
the online softmax of `efficient.tiled_attention`; scores live only in registers. Import needs the
`triton` package; running needs a CUDA GPU, or `TRITON_INTERPRET=1` (set before importing triton), which
runs the same kernel on the CPU, slowly, and is how the tests check it on machines without a GPU.

Dao et al. (2022), "FlashAttention"; Dao (2023), "FlashAttention-2".
"""

import math

import torch
import triton
import triton.language as tl

from .attention import validate_attention_inputs, validate_causal_lengths

LOG2_E = 1.4426950408889634  # exp(x) = 2^(x · log2 e); exp2 is the GPU's native instruction
SHARED_MEMORY_LIMIT = 227 * 1024  # bytes of shared memory one thread block may use on an H100 (sm_90)


@triton.jit
def _attend_block(acc, m, l, q, k_ptrs, v_ptrs, offs_q, offs_k, start, S,
                  offset, qk_scale, MASKED: tl.constexpr,
                  CAUSAL: tl.constexpr, stride_ks, stride_vs,
                  BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):
    """One key block: scores, online-softmax update of (m, l) and of the
    unnormalised output acc, all three in float32 (chapter 9)."""
    key_pos = start + offs_k  # (BLOCK_K,)
    k = tl.load(k_ptrs + start * stride_ks, mask=key_pos[None, :] < S,
                other=0.0)  # (d, BLOCK_K)
    # (BLOCK_Q, BLOCK_K) in log2 units; tl.dot accumulates in float32
    scores = tl.dot(q, k, input_precision=PRECISION) * qk_scale
    if MASKED:  # the block crosses the diagonal or the end of the keys
        allowed = key_pos[None, :] < S  # (1, BLOCK_K)
        if CAUSAL:
            allowed = allowed & (key_pos[None, :] <= offs_q[:, None] + offset)
        scores = tl.where(allowed, scores, float("-inf"))
    m_new = tl.maximum(m, tl.max(scores, 1))  # (BLOCK_Q,)
    rescale = tl.math.exp2(m - m_new)
    p = tl.math.exp2(scores - m_new[:, None])  # (BLOCK_Q, BLOCK_K)
    l = l * rescale + tl.sum(p, 1)
    v = tl.load(v_ptrs + start * stride_vs, mask=key_pos[:, None] < S,
                other=0.0)  # (BLOCK_K, d)
    pv = tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    acc = acc * rescale[:, None] + pv
    return acc, m_new, l


@triton.jit
def _attention_kernel(Q, K, V, O, LSE, stride_qb, stride_qt, stride_kb, stride_ks, stride_vb, stride_vs,
                      stride_ob, stride_ot, T, S, qk_scale,
                      CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
                      PRECISION: tl.constexpr):
    block = tl.program_id(0)  # which block of queries
    bh = tl.program_id(1).to(tl.int64)  # which (batch, head); 64 bits: bh · stride passes 2³¹ on large inputs
    offs_q = block * BLOCK_Q + tl.arange(0, BLOCK_Q)  # (BLOCK_Q,)
    offs_k = tl.arange(0, BLOCK_K)  # (BLOCK_K,)
    offs_d = tl.arange(0, HEAD_DIM)  # (d,)
    q = tl.load(Q + bh * stride_qb + offs_q[:, None] * stride_qt + offs_d[None, :],
                mask=offs_q[:, None] < T, other=0.0)  # (BLOCK_Q, d)
    k_ptrs = K + bh * stride_kb + offs_k[None, :] * stride_ks + offs_d[:, None]  # K transposed: (d, BLOCK_K)
    v_ptrs = V + bh * stride_vb + offs_k[:, None] * stride_vs + offs_d[None, :]  # (BLOCK_K, d)
    m = tl.full([BLOCK_Q], float("-inf"), dtype=tl.float32)  # running maximum
    l = tl.zeros([BLOCK_Q], dtype=tl.float32)  # running sum
    acc = tl.zeros([BLOCK_Q, HEAD_DIM], dtype=tl.float32)  # running unnormalised output
    offset = S - T  # query i sits at position offset + i (chapter 5's bottom-right mask)
    if CAUSAL:
        first_query = offset + block * BLOCK_Q
        # Key blocks wholly in the past of every query of this block: no mask needed.
        unmasked_end = (first_query + 1) // BLOCK_K * BLOCK_K
        unmasked_end = tl.minimum(unmasked_end, (S // BLOCK_K) * BLOCK_K)
        end = tl.minimum(first_query + BLOCK_Q, S)  # later keys are every query's future
    else:
        unmasked_end = (S // BLOCK_K) * BLOCK_K
        end = S
    for start in range(0, unmasked_end, BLOCK_K):
        acc, m, l = _attend_block(acc, m, l, q, k_ptrs, v_ptrs, offs_q, offs_k, start, S, offset, qk_scale,
                                  False, CAUSAL, stride_ks, stride_vs, BLOCK_K, PRECISION)
    for start in range(unmasked_end, end, BLOCK_K):  # the diagonal and the ragged end
        acc, m, l = _attend_block(acc, m, l, q, k_ptrs, v_ptrs, offs_q, offs_k, start, S, offset, qk_scale,
                                  True, CAUSAL, stride_ks, stride_vs, BLOCK_K, PRECISION)
    out = acc / tl.where(l == 0.0, 1.0, l)[:, None]  # no key at all (S = 0): a zero output, as in chapter 2
    tl.store(O + bh * stride_ob + offs_q[:, None] * stride_ot + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=offs_q[:, None] < T)
    tl.store(LSE + bh * T + offs_q, m + tl.math.log2(l), mask=offs_q < T)  # log-sum-exp, base 2: backward's


@triton.jit
def _tile_probabilities(q, k, lse, offs_q, offs_k, T, S, offset, qk_scale,
                        CAUSAL: tl.constexpr, PRECISION: tl.constexpr):
    """P = 2^(S − L) of one (BLOCK_Q, BLOCK_K) tile, recomputed from Q, K and the row log-sum-exp L,
    with blocked entries (the causal future, rows past T, columns past S) 0."""
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * qk_scale  # (BLOCK_Q, BLOCK_K), log2 units
    allowed = (offs_q[:, None] < T) & (offs_k[None, :] < S)
    if CAUSAL:
        allowed = allowed & (offs_k[None, :] <= offs_q[:, None] + offset)
    return tl.where(allowed, tl.math.exp2(scores - lse[:, None]), 0.0)


@triton.jit
def _backward_dk_dv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, stride_qb, stride_qt, stride_kb, stride_ks,
                           T, S, qk_scale, sm_scale, CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr,
                           BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):
    """dK and dV of one key block: the outer loop of FlashAttention-2's backward (which also adds into dQ
    with atomics; here dQ has its own pass, `_backward_dq_kernel`). The program walks the query blocks
    that can see its keys, recomputes P per tile, and writes dK_j and dV_j once."""
    block = tl.program_id(0)  # which block of keys
    bh = tl.program_id(1).to(tl.int64)
    offs_k = block * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_rows = bh * stride_kb + offs_k[:, None] * stride_ks + offs_d[None, :]  # (BLOCK_K, d)
    k = tl.load(K + kv_rows, mask=offs_k[:, None] < S, other=0.0)
    v = tl.load(V + kv_rows, mask=offs_k[:, None] < S, other=0.0)
    dk = tl.zeros([BLOCK_K, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_K, HEAD_DIM], dtype=tl.float32)
    offset = S - T
    first = 0
    if CAUSAL:  # queries before position block · BLOCK_K see none of these keys
        first = tl.maximum(block * BLOCK_K - offset, 0) // BLOCK_Q * BLOCK_Q
    for start in range(first, T, BLOCK_Q):
        offs_q = start + tl.arange(0, BLOCK_Q)
        q_rows = bh * stride_qb + offs_q[:, None] * stride_qt + offs_d[None, :]  # (BLOCK_Q, d)
        q = tl.load(Q + q_rows, mask=offs_q[:, None] < T, other=0.0)
        do = tl.load(DO + q_rows, mask=offs_q[:, None] < T, other=0.0)
        lse = tl.load(LSE + bh * T + offs_q, mask=offs_q < T, other=0.0)
        delta = tl.load(DELTA + bh * T + offs_q, mask=offs_q < T, other=0.0)
        p = _tile_probabilities(q, k, lse, offs_q, offs_k, T, S, offset, qk_scale, CAUSAL, PRECISION)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)  # dV_j += Pᵀ dO_i
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # (BLOCK_Q, BLOCK_K)
        ds = p * (dp - delta[:, None])  # dS = P ∘ (dP − D)
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)  # dK_j += dSᵀ Q_i
    tl.store(DK + kv_rows, (dk * sm_scale).to(DK.dtype.element_ty), mask=offs_k[:, None] < S)
    tl.store(DV + kv_rows, dv.to(DV.dtype.element_ty), mask=offs_k[:, None] < S)


@triton.jit
def _backward_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, stride_qb, stride_qt, stride_kb, stride_ks,
                        T, S, qk_scale, sm_scale, CAUSAL: tl.constexpr, HEAD_DIM: tl.constexpr,
                        BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):
    """dQ of one query block: it walks the key blocks its queries can see, as the forward does (a second
    pass, as in Triton's fused-attention tutorial, where FlashAttention-2 adds into dQ with atomics)."""
    block = tl.program_id(0)  # which block of queries
    bh = tl.program_id(1).to(tl.int64)
    offs_q = block * BLOCK_Q + tl.arange(0, BLOCK_Q)
    offs_d = tl.arange(0, HEAD_DIM)
    q_rows = bh * stride_qb + offs_q[:, None] * stride_qt + offs_d[None, :]  # (BLOCK_Q, d)
    q = tl.load(Q + q_rows, mask=offs_q[:, None] < T, other=0.0)
    do = tl.load(DO + q_rows, mask=offs_q[:, None] < T, other=0.0)
    lse = tl.load(LSE + bh * T + offs_q, mask=offs_q < T, other=0.0)
    delta = tl.load(DELTA + bh * T + offs_q, mask=offs_q < T, other=0.0)
    dq = tl.zeros([BLOCK_Q, HEAD_DIM], dtype=tl.float32)
    offset = S - T
    end = S
    if CAUSAL:
        end = tl.minimum(offset + block * BLOCK_Q + BLOCK_Q, S)  # later keys are every query's future
    for start in range(0, end, BLOCK_K):
        offs_k = start + tl.arange(0, BLOCK_K)
        kv_rows = bh * stride_kb + offs_k[:, None] * stride_ks + offs_d[None, :]  # (BLOCK_K, d)
        k = tl.load(K + kv_rows, mask=offs_k[:, None] < S, other=0.0)
        v = tl.load(V + kv_rows, mask=offs_k[:, None] < S, other=0.0)
        p = _tile_probabilities(q, k, lse, offs_q, offs_k, T, S, offset, qk_scale, CAUSAL, PRECISION)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)  # dQ_i += dS K_j
    tl.store(DQ + q_rows, (dq * sm_scale).to(DQ.dtype.element_ty), mask=offs_q[:, None] < T)


def triton_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, causal: bool = False,
                     block_q: int | None = None, block_k: int | None = None, num_warps: int | None = None,
                     num_stages: int | None = None):
    """softmax(Q Kᵀ / √d) V with one Triton kernel; query (B, H, T, d), key and value (B, H, S, d) (chapter 9).

    fp16, bf16 or fp32 on a CUDA device (or fp16 and fp32 on the CPU under TRITON_INTERPRET=1: the
    interpreter's tl.dot multiplies bf16 wrongly, triton-lang/triton#11584, so bf16 has never been checked
    by this book), d a power of two from 16
    to 256; no keys (S = 0) give zeros, as in chapter 2. fp32 is multiplied in full fp32 precision, not
    TF32. With `causal`, the queries are the last T of S positions. Blocks and stages default to `default_config`; whatever is given must fit a thread
    block's shared memory. Differentiable: the backward pass runs two more kernels (`TritonAttention`),
    with the forward's blocks; they are tested in the interpreter, not yet compiled on a GPU by this book.
    """
    validate_attention_inputs(query, key, value)
    validate_triton_device(query)
    if not (query.shape[:-2] == key.shape[:-2] == value.shape[:-2] and query.dim() == 4):
        raise ValueError(f"triton_attention wants (B, H, T, d) inputs with equal B and H, got query "
                         f"{tuple(query.shape)}, key {tuple(key.shape)}, value {tuple(value.shape)}")
    d = query.shape[-1]
    if value.shape[-1] != d or d not in (16, 32, 64, 128, 256):
        raise ValueError(f"head_dim must be the same power of two (16 to 256) for queries and values, "
                         f"got d_k={d}, d_v={value.shape[-1]}")
    T, S = query.shape[-2], key.shape[-2]
    if causal:
        validate_causal_lengths(T, S)
    defaults = default_config(query.dtype, d)
    block_q, block_k = block_q or defaults["block_q"], block_k or defaults["block_k"]
    num_stages, num_warps = num_stages or defaults["num_stages"], num_warps or defaults["num_warps"]
    validate_blocks(block_q, block_k, num_stages, d, query.dtype)
    settings = (causal, block_q, block_k, num_warps, num_stages)
    return TritonAttention.apply(query, key, value, settings)


def _precision(dtype: torch.dtype) -> str:
    return "ieee" if dtype == torch.float32 else "tf32"  # fp32 in full precision; fp16/bf16 as they are


class TritonAttention(torch.autograd.Function):
    """The Triton kernels for autograd: the forward kernel saves the row log-sum-exp, the two backward
    kernels recompute P from it tile by tile (dK/dV as in FlashAttention-2, dQ in its own pass; chapter 9)."""

    @staticmethod
    def forward(ctx, query, key, value, settings):
        causal, block_q, block_k, num_warps, num_stages = settings
        q, k, v = (t.flatten(0, 1).contiguous() for t in (query, key, value))  # (B·H, T or S, d)
        T, S, d = q.shape[1], k.shape[1], q.shape[2]
        out = torch.empty_like(q)  # (B·H, T, d)
        lse = torch.empty(q.shape[:2], dtype=torch.float32, device=q.device)  # (B·H, T), base 2
        grid = (triton.cdiv(T, block_q), q.shape[0])
        _attention_kernel[grid](q, k, v, out, lse, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                                v.stride(0), v.stride(1), out.stride(0), out.stride(1), T, S,
                                LOG2_E / math.sqrt(d), CAUSAL=causal, HEAD_DIM=d, BLOCK_Q=block_q,
                                BLOCK_K=block_k, PRECISION=_precision(q.dtype), num_warps=num_warps,
                                num_stages=num_stages)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.settings, ctx.shape = settings, query.shape
        return out.unflatten(0, query.shape[:2])  # (B·H, T, d) -> (B, H, T, d)

    @staticmethod
    def backward(ctx, grad_output):
        q, k, v, out, lse = ctx.saved_tensors
        causal, block_q, block_k, num_warps, _ = ctx.settings
        do = grad_output.flatten(0, 1).contiguous()  # (B·H, T, d)
        delta = (do.float() * out.float()).sum(dim=-1)  # D = rowsum(dO ∘ O): (B·H, T)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        T, S, d = q.shape[1], k.shape[1], q.shape[2]
        common = dict(CAUSAL=causal, HEAD_DIM=d, BLOCK_Q=block_q, BLOCK_K=block_k,
                      PRECISION=_precision(q.dtype), num_warps=num_warps)
        scales = (LOG2_E / math.sqrt(d), 1 / math.sqrt(d))
        _backward_dk_dv_kernel[(triton.cdiv(S, block_k), q.shape[0])](
            q, k, v, do, lse, delta, dk, dv, q.stride(0), q.stride(1), k.stride(0), k.stride(1), T, S, *scales,
            **common)
        _backward_dq_kernel[(triton.cdiv(T, block_q), q.shape[0])](
            q, k, v, do, lse, delta, dq, q.stride(0), q.stride(1), k.stride(0), k.stride(1), T, S, *scales,
            **common)
        shape = ctx.shape[:2]
        return dq.unflatten(0, shape), dk.unflatten(0, shape), dv.unflatten(0, shape), None


def default_config(dtype: torch.dtype, head_dim: int) -> dict:
    """Blocks, pipeline stages and warps for a dtype and head_dim: 128 × 64 blocks in 3 stages where they fit
    a thread block's shared memory, fewer stages, then smaller blocks, where they do not (chapter 9)."""
    for block_q, block_k, num_stages in ((128, 64, 3), (128, 64, 2), (64, 64, 2), (64, 32, 2)):
        if shared_memory_bytes(block_q, block_k, num_stages, head_dim, dtype) <= SHARED_MEMORY_LIMIT:
            return {"block_q": block_q, "block_k": block_k, "num_stages": num_stages,
                    "num_warps": 4 if head_dim <= 64 else 8}
    raise ValueError(f"no block configuration fits head_dim={head_dim} in {dtype}")


def shared_memory_bytes(block_q: int, block_k: int, num_stages: int, head_dim: int, dtype: torch.dtype) -> int:
    """An estimate of the kernel's shared memory: the Q tile, and a K and a V tile for each pipeline stage."""
    element = torch.empty((), dtype=dtype).element_size()
    return element * head_dim * (block_q + 2 * block_k * num_stages)


def validate_blocks(block_q: int, block_k: int, num_stages: int, head_dim: int, dtype: torch.dtype) -> None:
    """Blocks are powers of two of at least 16 (tl.dot's smallest tile), and they fit shared memory."""
    for name, size in (("block_q", block_q), ("block_k", block_k)):
        if not isinstance(size, int) or size < 16 or size & (size - 1):
            raise ValueError(f"{name} must be a power of two of at least 16, got {size!r}")
    need = shared_memory_bytes(block_q, block_k, num_stages, head_dim, dtype)
    if need > SHARED_MEMORY_LIMIT:
        raise ValueError(f"block_q={block_q}, block_k={block_k} in {num_stages} stages at head_dim={head_dim} in "
                         f"{dtype} need about {need // 1024} KiB of shared memory, more than the "
                         f"{SHARED_MEMORY_LIMIT // 1024} KiB a thread block has on an H100: use smaller blocks "
                         f"or fewer stages")


def validate_triton_device(query: torch.Tensor) -> None:
    """The kernels run on a CUDA device, or on the CPU in Triton's interpreter, where bf16 is refused:
    its tl.dot multiplies bf16 bit patterns as if they were another type (triton-lang/triton#11584)."""
    interpreted = not isinstance(_attention_kernel, triton.runtime.JITFunction)  # TRITON_INTERPRET=1 at import
    if query.device.type != "cuda" and not (interpreted and query.device.type == "cpu"):
        raise ValueError(f"query is on {query.device}: triton_attention runs on a CUDA device, or on the CPU "
                         "with TRITON_INTERPRET=1 set before triton is imported")
    if interpreted and query.dtype == torch.bfloat16:
        raise TypeError("query is bfloat16, which Triton's interpreter (TRITON_INTERPRET=1) multiplies wrongly "
                        "in tl.dot (triton-lang/triton#11584): use float16 or float32 on the CPU, or a CUDA GPU")
