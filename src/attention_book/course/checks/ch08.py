"""Checks of chapter 8's graded exercises (the ring's slots, MLA's absorbed step, a block table's gather, a
speculative draft rolled back); the registry entries at the end name each exercise, the function its
solution cell defines and what it may not call (see `..checks`)."""


import math

import torch

from ...kv_cache import RingKVCache
from ..spy import KeyValueCopies, copied_times
from .common import CASES, Check, case_generator, shape_problem, sizes


def check_ring_slots(ring_slots, seed: int = 0) -> str | None:
    """Chapter 8: after positions 0 … length − 1 went into a ring of `window` slots (position p in slot
    p mod window), the position each slot holds, in slot order."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        length, window = sizes(gen, 2, 13)
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


def plain_latent_step(q_c, q_r, c, k_r, w_uk, w_uv):
    """Chapter 8's plain MLA decode step: every head's keys W_uk_i c and values W_uv_i c projected up from
    the cached latents c (B, 1, S, d_c), its rope keys k_r (B, 1, S, d_r) shared by all heads."""
    keys = torch.einsum("hdc,bsc->bhsd", w_uk, c[:, 0])  # (B, H, S, d_h)
    values = torch.einsum("hdc,bsc->bhsd", w_uv, c[:, 0])  # (B, H, S, d_h)
    keys = torch.cat([keys, k_r.expand(-1, keys.shape[1], -1, -1)], dim=-1)  # (B, H, S, d_h + d_r)
    q = torch.cat([q_c, q_r], dim=-1)  # (B, H, 1, d_h + d_r)
    return torch.softmax(q @ keys.mT / math.sqrt(q.shape[-1]), dim=-1) @ values  # (B, H, 1, d_h)


def _latent_bound(q_c, q_r, c, k_r, w_uk, w_uv):
    """The largest tensor the absorbed step needs: the latents beside their rope keys, every head's scores,
    the absorbed weights, the queries in the latent space; never a key or value per head and position."""
    (B, H, _, d_h), (S, d_c), d_r = q_c.shape, c.shape[-2:], k_r.shape[-1]
    return max(B * S * (d_c + d_r), B * H * S, H * d_h * d_c, B * H * (d_c + d_r))


LATENT_READS = 2  # times the folded step reads the latents: the scores and the weighted sum


def check_absorbed_decode(absorbed_decode, seed: int = 0) -> str | None:
    """Chapter 8: MLA's decode step in its absorbed form, W_uk in the query and W_uv after the weighted sum,
    the H heads folded into the query rows so that the shared latents c are read once, not once per head."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B = sizes(gen, 1, 4)[0]
        H, d_h = 4 + case % 4, 2 + case % 3  # d_c = 2 d_h, d_r = 2: a key per head is larger than c
        S, d_c, d_r = 10 + sizes(gen, 1, 7)[0], 2 * d_h, 2
        q_c = torch.randn(B, H, 1, d_h, generator=gen, dtype=torch.float64)
        q_r = torch.randn(B, H, 1, d_r, generator=gen, dtype=torch.float64)
        c = torch.randn(B, 1, S, d_c, generator=gen, dtype=torch.float64)
        k_r = torch.randn(B, 1, S, d_r, generator=gen, dtype=torch.float64)
        w_uk, w_uv = (torch.randn(H, d_h, d_c, generator=gen, dtype=torch.float64) / math.sqrt(d_c)
                      for _ in range(2))
        given_c = c.clone()
        with KeyValueCopies(given_c) as watched:
            got = absorbed_decode(q_c, q_r, given_c, k_r, w_uk, w_uv)
        expected = plain_latent_step(q_c, q_r, c, k_r, w_uk, w_uv)
        setting = f"B={B}, H={H}, S={S}, d_h={d_h}, d_c={d_c}, d_r={d_r}"
        if problem := shape_problem(got, expected.shape, "the output"):
            return f"{setting}: {problem} (every head's weighted values, before the output projection)"
        if not torch.allclose(got, expected):
            return _absorbed_problem(got, expected, (q_c, q_r, c, k_r, w_uk, w_uv), setting)
        if watched.copies:
            call, shape, source = watched.copies[0]
            how = "a product broadcast" if call in {"matmul", "__matmul__", "__rmatmul__"} else f"{call} copied"
            return (f"{setting}: right values, but {how} the latents (B, 1, S, d_c) over the H heads, into a "
                    f"{shape} tensor ({copied_times(shape, source)} the latents); fold the heads into the query "
                    "rows, (B, H, 1, d_c) -> (B, 1, H, d_c), so that one product reads the latents for all heads")
        if watched.used != {0}:
            return (f"{setting}: right values, but computed out of the grader's sight: no torch product used the "
                    "latents c as given (a copy made through numpy cannot be checked)")
        if (reads := watched.reads.get(0, 0)) > LATENT_READS + 0.5:
            return (f"{setting}: right values, but your products read the latents (B, 1, S, d_c) {reads:g} times "
                    f"over, where the folded step reads them {LATENT_READS} times (the scores and the weighted "
                    "sum): a loop over the heads "
                    "reads them once per head; fold the heads into the query rows, (B, H, 1, d_c) -> "
                    "(B, 1, H, d_c), so that one product reads the latents for all heads")
    return None


def _absorbed_problem(got, expected, inputs, setting: str) -> str:
    """What a wrong absorbed step most likely got wrong."""
    q_c, q_r, c, k_r, w_uk, w_uv = inputs
    H, d_h, d_r = q_c.shape[1], q_c.shape[-1], q_r.shape[-1]
    up_k, up_v = (torch.einsum("hdc,bsc->bhsd", w, c[:, 0]) for w in (w_uk, w_uv))  # (B, H, S, d_h)
    if torch.allclose(got, torch.softmax(q_c @ up_k.mT / math.sqrt(d_h + d_r), dim=-1) @ up_v):
        return (f"{setting}: the scores miss the rope part: every head also scores its q_r against the shared "
                "rope keys k_r, added to the latent part")
    keys = torch.cat([up_k, k_r.expand(-1, H, -1, -1)], dim=-1)  # (B, H, S, d_h + d_r)
    for scale in (d_h, c.shape[-1], c.shape[-1] + d_r):
        weights = torch.softmax(torch.cat([q_c, q_r], dim=-1) @ keys.mT / math.sqrt(scale), dim=-1)
        if torch.allclose(got, weights @ up_v):
            return (f"{setting}: the scores are divided by √{scale}; absorbed, they are the plain scores, so "
                    f"they keep the plain scale 1/√(d_h + d_r) = 1/√{d_h + d_r}")
    return (f"{setting}: the output differs from the plain step, which projects every head's keys and values "
            f"up from the latents (largest difference {(got - expected).abs().max():.3g}); the absorbed query "
            "is q_c @ W_uk_i (d_c numbers), the output W_uv_i applied to the weighted sum of the latents")


def check_gather_blocks(gather_blocks, seed: int = 0) -> str | None:
    """Chapter 8: a sequence's keys (H_kv, length, d) gathered from a block pool (blocks, H_kv, size, d)
    through its block table: position p lives in block table[p // size], at offset p % size."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        heads, d = sizes(gen, 2, 5)
        size = 2 + case % 4  # blocks of 2 to 5 positions
        length = size + sizes(gen, 1, 4 * size)[0]  # at least two blocks
        count = -(-length // size)  # blocks the sequence holds
        num_blocks = count + sizes(gen, 1, 5)[0]
        table = torch.randperm(num_blocks, generator=gen)[:count].tolist()
        if table == sorted(table):  # out of order, so that pool order is told apart
            table = table[::-1]
        storage = torch.randn(num_blocks, heads, size, d, generator=gen, dtype=torch.float64)
        expected = torch.cat([storage[b] for b in table], dim=-2)[:, :length]  # (H_kv, length, d)
        setting = f"length={length}, blocks of {size}, table {table}"
        got = gather_blocks(storage.clone(), list(table), length)
        if hasattr(got, "shape") and tuple(got.shape) == (heads, count * size, d) and count * size > length:
            return (f"{setting}: you return all {count} blocks, {count * size} positions; the last block is "
                    f"filled only up to the length: keep the first {length}")
        if problem := shape_problem(got, expected.shape, "the keys"):
            return f"{setting}: {problem}"
        got = torch.as_tensor(got)
        if torch.equal(got, expected):
            continue
        pool_order = storage[:count].transpose(0, 1).flatten(1, 2)[:, :length]  # (H_kv, length, d)
        if torch.equal(got, pool_order):
            return (f"{setting}: you read the pool's blocks 0, 1, 2 … in order; the sequence's blocks are the "
                    "ones its table lists, position p in block table[p // size]")
        p = int(torch.nonzero((got != expected).any(dim=-1).any(dim=0))[0])
        return (f"{setting}: position {p} should come from block table[{p} // {size}] = {table[p // size]}, "
                f"offset {p} % {size} = {p % size}; yours differs")
    return None


def check_verify_draft(verify_draft, seed: int = 0) -> str | None:
    """Chapter 8: a speculative draft checked in one pass, then rolled back. The n = 1 + k new positions (the
    last token and a draft of k) are written after the `length` stored ones and attend causally; the cache
    keeps length + 1 + accepted positions, as if the rejected ones had never been appended."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        B, H, d = sizes(gen, 3, 4)
        length, draft = sizes(gen, 2, 7)
        accepted, n = case % (draft + 1), 1 + draft
        q, k_new, v_new = (torch.randn(B, H, n, d, generator=gen, dtype=torch.float64) for _ in range(3))
        keys, values = (torch.randn(B, H, length + n + 1 + case % 3, d, generator=gen, dtype=torch.float64)
                        for _ in range(2))
        k_buf, v_buf = keys.clone(), values.clone()
        setting = f"length={length}, a draft of {draft}, {accepted} accepted"
        got = verify_draft(q, k_new, v_new, k_buf, v_buf, length, accepted)
        if not isinstance(got, tuple | list) or len(got) != 2:
            return "return two things: the output (B, H, 1 + k, d_v) and the number of positions the cache keeps"
        output, kept = torch.as_tensor(got[0]), got[1]
        if not (torch.equal(k_buf[..., :length, :], keys[..., :length, :])
                and torch.equal(v_buf[..., :length, :], values[..., :length, :])):
            return f"{setting}: a stored position 0 … {length - 1} was overwritten: the new ones go after them"
        new = slice(length, length + n)
        if not (torch.equal(k_buf[..., new, :], k_new) and torch.equal(v_buf[..., new, :], v_new)):
            return (f"{setting}: slots {length} … {length + n - 1} of the buffers do not hold the {n} new keys "
                    "and values: write them in place (the caller keeps the buffers)")
        if kept == length + n and accepted < draft:
            return (f"{setting}: the cache keeps all {length + n} positions, the {draft - accepted} rejected "
                    f"draft tokens included; roll back to length + 1 + accepted = {length + 1 + accepted}")
        if kept == length + accepted:
            return (f"{setting}: the token fed before the draft stays (it was never in doubt): the cache keeps "
                    f"length + 1 + accepted = {length + 1 + accepted}")
        if kept != length + 1 + accepted:
            return f"{setting}: the cache keeps length + 1 + accepted = {length + 1 + accepted}, yours says {kept}"
        if problem := shape_problem(output, (B, H, n, d), "the output"):
            return f"{setting}: {problem}"
        if problem := _draft_attention_problem(output, q, k_buf[..., :length + n, :], v_buf[..., :length + n, :]):
            return f"{setting}: {problem}"
    return None


def _draft_attention_problem(output, q, keys, values) -> str | None:
    """None when `output` is causal attention of the n queries, the last n of the S positions."""
    n, S = q.shape[-2], keys.shape[-2]
    scores = q @ keys.mT / math.sqrt(q.shape[-1])  # (B, H, n, S)

    def attend(visible):  # (n, S)
        return torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1) @ values

    expected = attend(torch.ones(n, S, dtype=torch.bool).tril(diagonal=S - n))  # bottom-right aligned
    if torch.allclose(output, expected):
        return None
    if n > 1 and torch.allclose(output, attend(torch.ones(n, S, dtype=torch.bool))):
        return ("no causal mask inside the draft: a draft token's query saw the draft tokens after it, so its "
                f"logits read the future; query i sees positions 0 … {S - n} + i")
    if n > 1 and torch.allclose(output, attend(torch.ones(n, S, dtype=torch.bool).tril())):
        return (f"the mask is top-left aligned; the {n} queries are the last {n} positions, so query i sees "
                f"positions 0 … {S - n} + i (bottom-right, chapter 5)")
    return (f"the output differs from causal attention of the {n} new queries over the {S} positions "
            f"(largest difference {(output - expected).abs().max():.3g})")


CHECKS: dict[str, Check] = {
    "ch8.ring_slots": Check(check_ring_slots, "ring_slots",
          forbidden=("attention_book.kv_cache.RingKVCache.slot_positions",)),
    "ch8.absorbed_decode": Check(check_absorbed_decode, "absorbed_decode",
          forbidden=("attention_book.latent.LatentAttention.absorbed_attention",
                     "attention_book.latent.LatentAttention.absorbed_weights"),
          largest=_latent_bound, method="absorb W_uk and W_uv: never project the cached latents up per head"),
    "ch8.gather_blocks": Check(check_gather_blocks, "gather_blocks",
          forbidden=("attention_book.kv_cache.PagedKVCache.gather", "attention_book.kv_cache.PagedKVCache.slots")),
    "ch8.verify_draft": Check(check_verify_draft, "verify_draft", writes=(3, 4),  # the buffers, written in place
          forbidden=("attention_book.kv_cache.KVCache.truncate", "attention_book.causal.causal_mask",
                     "attention_book.attention.scaled_dot_product_attention",
                     "torch.nn.functional.scaled_dot_product_attention")),
}
