"""Exercises and assignments: the checks are not vacuous (issues 8 and 20), student notebooks hide the
solutions. Sandboxed grading and its cheats: test_grading.py."""

import dataclasses
import io
import re
import subprocess
import sys

import nbformat
import numpy as np
import pytest
import torch

import attention_book.multihead
from attention_book.course import checks, notebooks as assignments
from attention_book.course.checks import ch06, ch09, ch12
from attention_book.notebook_form import label_of
from attention_book.keras_decoder import KerasDecoderConfig, decoder_forward, keras_weight_map
from attention_book.gpt import top_k_top_p
from attention_book.positions import apply_rope
from conftest import NOTEBOOKS


def solution_cells(path):
    """(exercise label, solution source, check name, function name) of every graded exercise of a chapter."""
    cells = nbformat.read(path, as_version=4).cells
    found = []
    for i, cell in enumerate(cells):
        if cell.cell_type == "code" and (label := label_of(cell, "solution")):
            check_cell = next(c.source for c in cells[i + 1:] if c.cell_type == "code" and "check(" in c.source)
            name, function = re.search(r'check\("([\w.]+)", (\w+)\)', check_cell).groups()
            found.append((label, cell.source, name, function))
    return found


GRADED = [(path.name, *item) for path in NOTEBOOKS for item in solution_cells(path)]


def define(source: str, function: str):
    namespace = {}
    exec(compile(source, "<solution>", "exec"), namespace)  # noqa: S102 - the book's own cells
    return namespace[function]



def test_every_chapter_has_three_graded_exercises():
    for path in NOTEBOOKS:
        cells = nbformat.read(path, as_version=4).cells
        assert sum(bool(label_of(c, "exercise")) for c in cells) >= 3, path.name
        assert len(solution_cells(path)) >= 3, path.name
    assert {name for _, _, _, name, _ in GRADED} == set(checks.CHECKS), "every check is used by a chapter"


@pytest.mark.parametrize(("chapter", "label", "solution", "name", "function"), GRADED, ids=lambda v: str(v)[:30])
def test_reference_solution_passes(chapter, label, solution, name, function, capsys):
    result = checks.evaluate(name, define(solution, function))
    assert result.passed, result.message
    function = define(solution, function)
    capsys.readouterr()  # what the solution cell itself prints
    checks.check(name, function)
    assert capsys.readouterr().out == f"✓ {name}: passed on {checks.CASES} random cases\n"


@pytest.mark.parametrize(("chapter", "label", "solution", "name", "function"), GRADED, ids=lambda v: str(v)[:30])
def test_student_stub_fails_with_its_hint(chapter, label, solution, name, function):
    stub = assignments.stub(solution)
    assert "NotImplementedError" in stub
    hint = assignments.hint_of(solution)
    result = checks.evaluate(name, define(stub, function))
    assert not result.passed
    assert result.message == f"not implemented yet. Hint: {hint}"


def _named(datasets, group="multi_head_attention"):
    """Our names -> arrays, from a weight file's datasets, the attention's read from `group`."""
    named = {name: datasets[path.replace("multi_head_attention", group)]
             for name, (path, _) in keras_weight_map(KerasDecoderConfig()).items()}
    return named


def _port_without_transposes(weights):
    """Chapter 6's port with the Dense kernel copied as it is, (E, V) (a wrong answer)."""
    from attention_book.keras_decoder import torch_from_keras_map

    state = torch_from_keras_map(weights)
    state["dense.weight"] = weights["dense_kernel"]
    return state


def _greedy_from_position_0(h5_bytes, prompt, steps):
    """ch6-generate-h5 with the next token read from position 0 instead of the last."""
    import io

    import h5py

    with h5py.File(io.BytesIO(h5_bytes.tobytes()), "r") as file:
        V, E = file["layers/embedding/vars/0"].shape
        _, H, K = file["layers/multi_head_attention/query_dense/vars/0"].shape
        config = KerasDecoderConfig(vocab_size=V, embed_dim=E, num_heads=H, key_dim=K)
        w = {name: file[path][()] for name, (path, _) in keras_weight_map(config).items()}
    tokens, chosen = np.asarray(prompt), []
    for _ in range(steps):
        p = decoder_forward(w, tokens)[:, 0]  # (B, V): position 0's, not the last's
        chosen.append(p)
        tokens = np.concatenate([tokens, p.argmax(-1)[:, None]], axis=1)
    return tokens, np.stack(chosen, axis=1)


def _two_layers_with(datasets, tokens, group):
    """Two attention layers that both read `group` (a wrong answer when it is the first one)."""
    from attention_book.course.checks.ch06 import read_out, residual

    w = _named(datasets, group)
    return read_out(w, residual(w, residual(w, w["embedding"][tokens])))


def _block(weights, num_heads):
    """Chapter 7's DecoderBlock holding `weights` (chapter 12's exercise passes a block's state dict)."""
    from attention_book.decoder import DecoderBlock, DecoderConfig

    E = weights["norm1.weight"].shape[0]
    block = DecoderBlock(DecoderConfig(vocab_size=2, context_length=8, embed_dim=E, num_heads=num_heads,
                                       num_layers=1))
    block.load_state_dict(weights)
    return block


def _attention(weights, num_heads):
    """Chapter 3's MultiHeadAttention holding `weights`."""
    mha = attention_book.multihead.MultiHeadAttention(weights["q_proj.weight"].shape[1], num_heads)
    mha.load_state_dict(weights)
    return mha


# A deliberately wrong solution for every check, and the feedback it must get.
WRONG = {
    "ch12.block": (lambda x, w, H: ch12.block_variants(_block(w, H), x)["post-norm"],
                   r"that is a post-norm block, norm\(x \+ f\(x\)\)"),
    "ch12.lm_loss": (lambda logits, tokens: -logits.log_softmax(-1).gather(-1, tokens[..., None]).mean(),
                     r"position t is scored on token t, which it already sees"),
    "ch12.filter_logits": (lambda logits, k, p: logits.masked_fill(torch.zeros_like(logits, dtype=torch.bool).scatter(
        -1, logits.sort(-1, descending=True).indices, logits.sort(-1, descending=True).values.softmax(-1).cumsum(-1)
        > p), float("-inf")) if p is not None else logits if k is None else
        logits.masked_fill(logits < logits.topk(k).values[:, -1:], float("-inf")),
        r"the token whose probability carries the running sum past p must be kept too"),
    "ch12.without_head": (lambda x, w, H, head: ch12.attention_without(_attention(w, H), x, [head], bias=False),
                          r"W\^O's bias belongs to no head"),
    "ch12.lr_schedule": (lambda peak, warmup, steps: ch12.schedule_variants(peak, warmup, steps)["to zero"],
                         r"the cosine ends at 0; here it ends at a tenth of the peak"),
    "ch1.embed": (lambda ids, table: table[: len(ids)], r"the embeddings of ids .*; position t gets row ids\[t\]"),
    "ch3.mask_to_sdpa": (lambda attn_mask, key_padding_mask: attn_mask[None, None] | key_padding_mask[:, None, None, :],
                         r"the convention is flipped: nn.MultiheadAttention's True means blocked"),
    "ch4.padded_attention": (lambda q, k, v, lengths: torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, -1) @ v,
                             r"the padding is attended: with lengths \[.*\], keys at or beyond a length"),
    # chapters 1-4's exercises (issue 29)
    "ch1.stable_softmax": (lambda s: torch.exp(s) / torch.exp(s).sum(-1, keepdim=True),
                           r"row \d+ has NaN: its scores reach \d+, exp overflows float32"),
    "ch1.embedding_grad": (lambda ids, grad_out, V: torch.zeros(V, grad_out.shape[1]).index_put((ids,), grad_out),
                           r"token \d+ occurs at positions .*: its row must be the sum of their gradients"),
    "ch2.jacobian": (lambda s: torch.outer(torch.softmax(s, -1), torch.softmax(s, -1)) - torch.diag(torch.softmax(s, -1)),
                     r"the sign is flipped"),
    "ch2.score_variance": (lambda W_q, W_k, C: (W_q @ W_k.T).square().sum() / W_q.shape[1],
                           r"that is the variance for unit-variance, uncorrelated inputs \(C = I"),
    "ch2.linear_port": (lambda W_q, W_k, W_v: {"q_proj.weight": W_q, "k_proj.weight": W_k, "v_proj.weight": W_v},
                        r"q_proj.weight should have nn.Linear's shape \(d_out, d_in\)"),
    "ch3.ablate_heads": (lambda w, keep: w * keep.repeat(w.shape[1] // keep.shape[0]).float(),
                         r"head h's columns are contiguous.*repeat_interleave, not repeat"),
    "ch3.mqa": (lambda q, k, v: torch.softmax(q @ k.repeat(1, q.shape[1] // k.shape[1], 1, 1).transpose(-2, -1)
                                              / q.shape[-1] ** 0.5, -1) @ v.repeat(1, q.shape[1] // k.shape[1], 1, 1),
                r"consecutive query heads share one, so query heads h·\d … h·\d \+ \d use key/value head h"),
    "ch2.additive": (lambda q, k, W_1, W_2, v_a: ((q @ W_1)[:, None] + (k @ W_2)[None]) @ v_a,
                     r"the tanh is missing"),
    "ch3.ov_matrices": (lambda v_w, out_w, H: torch.stack([v_w[i * (len(v_w) // H):(i + 1) * (len(v_w) // H)].T
                                                            @ out_w[i * (len(v_w) // H):(i + 1) * (len(v_w) // H)]
                                                            for i in range(H)]),
                        r"you took rows i·\d … \(i\+1\)·\d − 1 of out_weight: .* head i's block is its columns"),
    "ch4.cross_attention": (lambda x, key, value, w, H: torch.softmax(
        (x @ w["q_proj_weight"].T + w["in_proj_bias"].chunk(3)[0])
        @ (key @ w["k_proj_weight"].T + w["in_proj_bias"].chunk(3)[1]).transpose(1, 2) / x.shape[-1] ** 0.5, -1)
        @ (value @ w["v_proj_weight"].T + w["in_proj_bias"].chunk(3)[2]) @ w["out_proj.weight"].T
        + w["out_proj.bias"], r"you attended with one head of width E = \d+: split q, k and v into H = \d+ heads"),
    "ch4.cross_cache": (lambda y, memory, W_q, W_k, W_v: (y, (memory @ W_k[0]).expand(len(W_k), -1, -1),
                                                          memory @ W_v),
                        r"layer 1's keys are layer 0's: every layer projects the memory with its own W_k\[1\]"),
    "ch4.masked_loss": (lambda logits, labels, lengths: -torch.log_softmax(logits, -1).gather(-1, labels[..., None])
                        .mean(), r"you averaged over every position, padding included"),
    "ch5.offset_causal_mask": (lambda T, S: torch.ones(T, S, dtype=torch.bool).tril(),
                               r"your triangle starts at the top left \(as is_causal=True does\)"),
    "ch5.padded_causal_mask": (lambda lengths, T, left: torch.ones(T, T, dtype=torch.bool).tril()
                               & (torch.arange(T) < lengths[:, None])[:, None, :],
                               r"with left padding the padding sits at the left"),
    "ch5.attention_dropout": (lambda q, k, v, keep, p: (torch.softmax((q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5)
                                                              .masked_fill(~torch.ones(q.shape[-2], q.shape[-2],
                                                                                       dtype=torch.bool).tril(),
                                                                           float("-inf")), -1) * keep) @ v,
                              r"the kept weights must be divided by 1 - p"),
    "ch5.first_leak": (lambda full, prefixes: next((t for t, run in enumerate(prefixes)
                                                    if not torch.equal(run[-1], full[t])), None),
                       r"a causal module .*: position \d+ moves by only .* float32 rounding of a run of another length"),
    "ch5.packed_mask": (lambda document: torch.ones(len(document), len(document), dtype=torch.bool).tril(),
                        r"query \d+ \(document \d+\) may see key \d+ of document \d+"),
    "ch9.merge_partials": (lambda m_a, l_a, acc_a, m_b, l_b, acc_b: (torch.maximum(m_a, m_b), l_a + l_b, acc_a + acc_b),
                           r"l_a \+ l_b adds sums taken against different maxima"),
    "ch9.backward_skips": (lambda T, S, block_q, block_k, j: ch09.backward_tiles(T, T, block_q, block_k, j),
                           r"your mask is top-left; the queries are the last T positions"),
    "ch9.score_gradient": (lambda z, v, d_o: torch.softmax(z, -1) * (d_o @ v.T),
                           r"dZ = P ∘ dP misses the Jacobian's −P_ij Σ_k P_ik dP_ik: subtract D_i"),
    "ch9.block_sizes": (lambda d, element, budget, stages: ch09.best_blocks(d, element, budget, 1),
                        r"needs \d+ bytes, more than the budget: count a K and a V tile for each of the num_stages"),
    "ch4.padding_mask": (lambda lengths, S: torch.arange(S) <= lengths[:, None],
                         r"sequence \d+ has length \d+: your mask lets queries see padded position \d+"),
    "ch6.torch_port": (lambda weights: _port_without_transposes(weights),
                       r"dense.weight has shape \(\d, \d\), the module holds \(\d, \d\): nn.Linear stores its "
                       r"weight as \(out, in\)|dense.weight is not transposed"),
    "ch6.padded": (lambda weights, tokens: decoder_forward(weights, tokens),
                   r"\(left padding\): the real tokens read the padding keys"),
    "ch6.two_layers": (lambda datasets, tokens: _two_layers_with(datasets, tokens, "multi_head_attention"),
                       r"both attention layers used the arrays of layers/multi_head_attention; the second is "
                       r"layers/multi_head_attention_1"),
    "ch6.h5_generation": (_greedy_from_position_0,
                          r"step \d+: (these are position 0's probabilities|you gave step 0's distribution again)"),
    "ch8.absorbed_decode": (lambda q_c, q_r, c, k_r, w_uk, w_uv: torch.einsum(  # scaled by 1/√d_h only
                                "bhc,hdc->bhd", (torch.softmax(
                                    (torch.einsum("bhtd,hdc->bhtc", q_c, w_uk).flatten(1, 2)[:, None] @ c.mT
                                     + q_r.flatten(1, 2)[:, None] @ k_r.mT) / q_c.shape[-1] ** 0.5, -1) @ c)[:, 0],
                                w_uv)[:, :, None],
                            r"the scores are divided by √\d+; absorbed, they are the plain scores"),
    "ch8.gather_blocks": (lambda storage, table, length:  # the pool's blocks in pool order, not the table's
                          storage[:len(table)].transpose(0, 1).flatten(1, 2)[:, :length],
                          r"you read the pool's blocks 0, 1, 2 … in order"),
    "ch8.ring_slots": (lambda length, window: torch.arange(max(0, length - window), length),
                       r"the right positions, in the wrong order"),
    "ch7.cached_step": (lambda q, k, v, keys, values, n: (keys.__setitem__((..., n, slice(None)), k[..., 0, :]),
                                                          values.__setitem__((..., n, slice(None)), v[..., 0, :]),
                                                          torch.softmax(q @ keys.mT / q.shape[-1] ** 0.5, -1) @ values,
                                                          n + 1)[2:],
                        r"you attended over the whole buffer"),
    "ch7.fit_bandwidth": (lambda b, t: tuple(np.polyfit(b, t, 1)[::-1]), r"your bandwidth is the slope"),
    "ch7.cached_forward": (lambda tokens, w, keys, values: _cached_forward_by_hand(tokens, w, keys, values, 0),
                           r"embedded at position\(s\) 0.*as if the sequence started again"),
    "ch8.verify_draft": (lambda q, k_new, v_new, keys, values, length, accepted: (
                             keys.__setitem__((..., slice(length, length + q.shape[-2]), slice(None)), k_new),
                             values.__setitem__((..., slice(length, length + q.shape[-2]), slice(None)), v_new),
                             torch.softmax(q @ keys[..., :length + q.shape[-2], :].mT / q.shape[-1] ** 0.5, -1)
                             @ values[..., :length + q.shape[-2], :],
                             length + q.shape[-2])[2:],  # the rejected draft kept
                         r"the cache keeps all \d+ positions, the \d+ rejected draft tokens included"),
    "ch10.rope_half": (lambda x: apply_rope(x), r"that is RoPE on adjacent pairs \(2i, 2i \+ 1\), this book's layout"),
    "ch10.alibi": (lambda T, H: -torch.stack([2.0 ** (-8 * (h + 1) / H) * (torch.arange(T)[:, None]
                                                                      - torch.arange(T)[None, :]).double()
                                              for h in range(H)]),
                   r"keys after the query \(j > t\) should get 0|wrong sign"),
    "ch10.rope_interpolated": (lambda x, scale: apply_rope(x), r"that is plain RoPE"),
    "ch11.k_composition": (lambda qk, ov: torch.linalg.matrix_norm(qk @ ov.T), r"the score is not normalised"),
    "ch11.mean_ablation": (lambda outputs, head: outputs.index_fill(1, torch.tensor([head]), 0.0),
                           r"that zeroes the head"),
    "ch11.ov_positivity": (lambda circuit: 1.0, r"singular values are never negative"),
    "ch11.steepest_fall": (lambda steps, losses: max(((steps[i - 1], losses[i - 1] - losses[i])
                                                      for i in range(1, len(steps))), key=lambda p: p[1]),
                           r"you return step \d+, where the largest fall starts"),
}


@pytest.mark.parametrize("name", sorted(checks.CHECKS))
def test_wrong_solution_gets_specific_feedback(name, monkeypatch):
    """The diagnosis of each wrong answer. Some are built from the package's own functions, which their
    exercise forbids (check() refuses those calls as the grader does: tests/test_grading_check.py), so the
    forbidden list is left out here."""
    monkeypatch.setitem(checks.CHECKS, name, dataclasses.replace(checks.CHECKS[name], forbidden=()))
    wrong, message = WRONG[name]
    result = checks.evaluate(name, wrong)
    assert not result.passed
    assert re.search(message, result.message), result.message


def test_embed_grader_refuses_indexing_and_accepts_the_product():
    """ch1-embed asks for a one-hot product: the right rows read by indexing the table are told so."""
    for shortcut in (lambda ids, table: table[ids], lambda ids, table: table.index_select(0, ids),
                     lambda ids, table: torch.stack([table[i] for i in ids])):
        result = checks.evaluate("ch1.embed", shortcut)
        assert not result.passed and result.message.startswith("right rows, but read by indexing"), result.message
    product = checks.evaluate("ch1.embed", lambda ids, table: torch.einsum(
        "tv,vd->td", (ids[:, None] == torch.arange(table.shape[0])).to(table.dtype), table))
    assert product.passed, product.message


def test_mqa_grader_refuses_copied_key_value_heads():
    """ch3-mqa asks for grouped-query attention without copying the shared heads: a repeat is told so, and
    so is a size-1 group axis broadcast by matmul (it materialises the expanded keys and values before its
    bmm); the queries folded into (B, H_kv, G·T, d), or an einsum, copy nothing and pass."""
    def repeated(q, k, v):
        group = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
        return torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1) @ v

    def broadcast(q, k, v):  # round 2's "no copy" solution: matmul copies k and v into each group
        B, H, T, d = q.shape
        q = q.reshape(B, k.shape[1], H // k.shape[1], T, d)
        k, v = k[:, :, None], v[:, :, None]  # (B, H_kv, 1, S, d)
        return (torch.softmax(q @ k.transpose(-2, -1) / d**0.5, -1) @ v).reshape(B, H, T, d)

    def folded(q, k, v):
        B, H, T, d = q.shape
        q = q.reshape(B, k.shape[1], H // k.shape[1] * T, d)  # (B, H_kv, G·T, d): a view
        return (torch.softmax(q @ k.transpose(-2, -1) / d**0.5, -1) @ v).reshape(B, H, T, d)

    def summed(q, k, v):
        B, H, T, d = q.shape
        q = q.reshape(B, k.shape[1], H // k.shape[1], T, d)
        scores = torch.einsum("bhgtd,bhsd->bhgts", q, k) / d**0.5
        return torch.einsum("bhgts,bhsd->bhgtd", torch.softmax(scores, -1), v).reshape(B, H, T, d)

    result = checks.evaluate("ch3.mqa", repeated)
    assert not result.passed and "the key/value heads were copied (repeat_interleave made a" in result.message, \
        result.message
    result = checks.evaluate("ch3.mqa", broadcast)
    assert not result.passed and re.search(r"copied: torch.matmul \(@\) broadcast a shared head over its group of \d query heads",
                                           result.message), result.message
    for right in (folded, summed):
        result = checks.evaluate("ch3.mqa", right)
        assert result.passed, result.message


def test_first_leak_grader_names_each_leak():
    """ch5-first-leak: a test that never flags, and one that compares only the last position, are told which
    leaking module they let through and where it leaks."""
    never = checks.evaluate("ch5.first_leak", lambda full, prefixes: None)
    assert re.search(r"mask is off by one on the diagonal .* leaks: cut after position \d+", never.message), \
        never.message
    def last_only(full, prefixes):
        return None if torch.allclose(prefixes[-1][-1], full[-1], atol=1e-5) else len(full) - 1

    def every_but_the_late_one(full, prefixes):  # compares positions 0 … T - 3 only
        return next((t for t in range(len(full) - 2) if not torch.allclose(prefixes[t][-1], full[t], atol=1e-5)),
                    None)
    assert "you returned None" in checks.evaluate("ch5.first_leak", last_only).message
    late = checks.evaluate("ch5.first_leak", every_but_the_late_one).message
    assert re.search(r"position T - 2 alone sees token T - 1 .*compare every position", late), late


def test_first_leak_late_leak_is_absolute_and_rounding_is_only_rounding():
    """ch5-first-leak: the late leak is absolute (position T - 2 of the full pass reads token T - 1), so the
    prefix runs without token T - 1 are causal row by row; a solution comparing every row of every run finds
    the same first leak and passes; a position the grader calls "float32 rounding" moves by less than 1e-5
    in every run handed over (checked on the data the solution received)."""
    from attention_book.course.checks.ch05 import prefix_runs
    from attention_book.course.checks.common import case_generator

    full, prefixes = prefix_runs(case_generator(0, 4), "late")
    T = len(full)
    for t, run in enumerate(prefixes):
        moves = (run - full[: t + 1]).abs().amax(-1) > 1e-5  # (t + 1,): which rows moved
        assert moves.tolist() == [t == T - 2 and s == T - 2 for s in range(t + 1)], (t, moves)

    def every_row(full, prefixes):  # the first run in which any row moves
        return next((t for t, run in enumerate(prefixes) if (run - full[: t + 1]).abs().max() > 1e-5), None)
    for seed in (0, 1):
        result = checks.evaluate("ch5.first_leak", every_row, seed=seed)
        assert result.passed, result.message

    seen = {}

    def recording(answer):
        def solution(full, prefixes):
            seen.update(full=full, prefixes=prefixes)
            return answer(full, prefixes)
        return solution
    wrong = [lambda full, prefixes: next((s for t, run in enumerate(prefixes) for s in range(t + 1)
                                          if not torch.equal(run[s], full[s])), None),  # exact, every row
             lambda full, prefixes: 1, lambda full, prefixes: len(full) - 1]
    called_rounding = 0
    for answer in wrong:
        message = checks.evaluate("ch5.first_leak", recording(answer)).message
        if called := re.search(r"position (\d+) moves by .* float32 rounding", message):
            g = int(called.group(1))
            largest = max(float((run[g] - seen["full"][g]).abs().max()) for run in seen["prefixes"][g:])
            assert largest <= 1e-5, (message, largest)
            called_rounding += 1
    assert called_rounding, "no wrong answer was told float32 rounding: the test tested nothing"


def test_h5_generation_grader_is_what_keras_writes_and_generates(tmp_path):
    """ch6-generate-h5: the check's files hold what a Keras model holding the same arrays writes: the same
    groups and datasets at the same paths, of the same shapes and dtypes, the same `name` attributes, the same
    model arrays (the optimizer's group with other values); and the check's greedy reference is Keras's own
    greedy loop: the same probabilities (float32 rounding) and the same tokens."""
    import h5py
    import keras

    from attention_book.course.checks.ch06 import KERAS_NAMES, h5_bytes_of, random_generation_case
    from attention_book.keras_decoder import keras_decoder_from_weights

    def listing(file):  # path -> (kind, attributes, shape, dtype) of every group and dataset
        found = {}
        file.visititems(lambda path, item: found.__setitem__(path, (
            type(item).__name__, dict(item.attrs), getattr(item, "shape", None), getattr(item, "dtype", None))))
        return found

    rng = np.random.default_rng([0, 64])
    for _ in range(4):
        config, named, datasets, prompt, steps = random_generation_case(rng)
        keras.backend.clear_session()  # the sub-layers' names as a fresh session gives them: softmax, not softmax_3
        model = keras_decoder_from_weights(named, config)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        model.optimizer.build(model.trainable_variables)
        model.save_weights(tmp_path / "decoder.weights.h5")
        with h5py.File(tmp_path / "decoder.weights.h5", "r") as keras_file, \
                h5py.File(io.BytesIO(h5_bytes_of(datasets, KERAS_NAMES).tobytes()), "r") as check_file:
            assert listing(check_file) == listing(keras_file)
            assert dict(check_file.attrs) == dict(keras_file.attrs)
            for path in datasets:  # the model's arrays equal; the optimizer's state has other values
                if path.startswith("layers/"):
                    np.testing.assert_array_equal(check_file[path][()], keras_file[path][()])
        tokens, chosen = prompt, []
        for _ in range(steps):  # Keras generates greedily
            p = np.asarray(model(tokens), dtype=np.float64)[:, -1]  # (B, V)
            chosen.append(p)
            tokens = np.concatenate([tokens, p.argmax(-1)[:, None]], axis=1)
        expected_tokens, expected = ch06.greedy_reference(named, prompt, steps)
        np.testing.assert_array_equal(tokens, expected_tokens)
        np.testing.assert_allclose(np.stack(chosen, axis=1), expected, atol=1e-6)


def _greedy_from_h5_by(find, scaled: bool = True, stuck: bool = False):
    """A greedy_from_h5 whose arrays come from `find(file, layer)` -> the group holding vars 0 and 1 of the
    layer ("embedding", "query", …, "dense"); `scaled` off forgets 1/√d_k; `stuck` runs every step on the
    prompt alone (the loop's mistake)."""
    import h5py

    def greedy_from_h5(h5_bytes, prompt, steps):
        with h5py.File(io.BytesIO(h5_bytes.tobytes()), "r") as file:
            w = {layer: [find(file, layer)[str(i)][()] for i in range(1 + (layer != "embedding"))]
                 for layer in ("embedding", "query", "key", "value", "output", "dense")}
        tokens, chosen = np.asarray(prompt), []
        for _ in range(steps):
            x = w["embedding"][0][np.asarray(prompt) if stuck else tokens]  # (B, T, E)
            q, k, v = (np.einsum("bte,ehk->bhtk", x, w[n][0]) + w[n][1][:, None] for n in ("query", "key", "value"))
            scores = np.einsum("bhk,bhsk->bhs", q[:, :, -1], k) / (np.sqrt(q.shape[-1]) if scaled else 1.0)
            context = np.einsum("bhs,bhsk->bhk", ch06.softmax(scores), v)  # (B, H, d_k): the last query
            p = ch06.softmax((np.einsum("bhk,hke->be", context, w["output"][0]) + w["output"][1]) @ w["dense"][0]
                             + w["dense"][1])  # (B, V)
            chosen.append(p)
            tokens = np.concatenate([tokens, p.argmax(-1)[:, None]], axis=1)
        return tokens, np.stack(chosen, axis=1)
    return greedy_from_h5


def test_h5_generation_grader_names_groups_as_keras_and_blames_the_loop_only_when_it_can():
    """ch6-generate-h5: a reader who finds the layers by their `name` attributes (as the chapter does) passes;
    a pass without the 1/√d_k scale, whose step 0 is right with a one-token prompt (one key, weight 1), is not
    told its loop is wrong but where to look; a loop that runs every step on the prompt alone is, when the
    prompt has more than one token."""
    names = {"embedding": "embedding", "query": "query", "key": "key", "value": "value",
             "output": "attention_output", "dense": "next_token"}

    def by_name(file, layer):
        found = []
        file.visititems(lambda path, item: found.append(item) if item.attrs.get("name") == names[layer] else None)
        assert len(found) == 1, (layer, found)
        return found[0]
    assert checks.evaluate("ch6.h5_generation", _greedy_from_h5_by(by_name)).passed

    unscaled = checks.evaluate("ch6.h5_generation", _greedy_from_h5_by(by_name, scaled=False)).message
    one_token = re.search(r"prompt \[(\[\d+\](, )?)+\], step [1-9]", unscaled)
    assert one_token and "runs the model on the prompt and every token chosen so far," not in unscaled, unscaled
    assert "one-token prompt its softmax has one key" in unscaled and "1/√d_k" in unscaled, unscaled
    stuck = checks.evaluate("ch6.h5_generation", _greedy_from_h5_by(by_name, stuck=True)).message
    assert re.search(r"prompt \[\[\d+, \d+.*step 0 is right, step [1-9] is not: each step runs the model on the "
                     r"prompt and every token chosen so far", stuck), stuck


def test_padded_attention_grader_tests_an_empty_source():
    """ch4-padded: a source of length 0 gets zeros; the softmax over only −inf (NaN there) is told so."""
    def nan_for_empty(q, k, v, lengths):
        real = (torch.arange(k.shape[1]) < lengths[:, None])[:, None, :]  # (B, 1, S)
        scores = (q @ k.transpose(1, 2) / q.shape[-1] ** 0.5).masked_fill(~real, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    message = checks.evaluate("ch4.padded_attention", nan_for_empty).message
    assert re.match(r"sequence \d+ has length 0: its queries may see no key", message), message


def test_a_crashing_solution_is_feedback_not_a_crash():
    result = checks.evaluate("ch4.padding_mask", lambda lengths, S: lengths.foo)
    assert not result.passed and result.message.startswith("your function raised AttributeError")
    unreadable = checks.evaluate("ch4.padding_mask", lambda lengths, S: "a string")
    assert not unreadable.passed and unreadable.message == "the mask should be a tensor of shape (4, 4), yours is a str"
    unusable = checks.evaluate("ch2.jacobian", lambda s: [[0.0] * len(s)] * len(s))
    assert not unusable.passed and "yours is a list" in unusable.message, unusable.message


def test_every_check_names_the_function_its_chapter_defines():
    for _, _, solution, name, function in GRADED:
        assert checks.CHECKS[name].function == function, name
        assert f"def {function}(" in solution, name


def test_grading_seeds_draw_other_inputs_than_the_notebook():
    seen = {}
    for seed in (0, 1):
        def spy(lengths, S, seed=seed):
            seen.setdefault(seed, []).append((lengths.tolist(), S))
            return torch.arange(S) < lengths[:, None]
        assert checks.evaluate("ch4.padding_mask", spy, seed=seed).passed
    assert seen[0] != seen[1]


@pytest.fixture(scope="module")
def students(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    return {path.name: path for path in assignments.make_student_notebooks(NOTEBOOKS[0].parent, out)}


def test_student_notebooks_keep_everything_but_solutions(students):
    assert sorted(students) == sorted(p.name for p in NOTEBOOKS)
    for path in NOTEBOOKS:
        teacher = nbformat.read(path, as_version=4)
        student = nbformat.read(students[path.name], as_version=4)
        text = "\n".join(c.source for c in student.cells)
        assert not any(label_of(c, "solution") for c in student.cells), f"{path.name}: a solution leaked"
        assert "Solutions are folded away" not in text, f"{path.name}: says solutions are folded in a notebook without"
        assert all(not c.get("outputs") and c.get("execution_count") is None for c in student.cells if c.cell_type == "code")
        for _, solution, _, _ in solution_cells(path):
            body = solution.split('"""')[-1]  # the code after the docstring
            assert body.strip() not in text
        kept = [c.source for c in teacher.cells if not label_of(c, "solution") and "Solutions are folded" not in c.source]
        assert all(source in text for source in kept), f"{path.name}: a cell other than a solution was changed"


def test_stub_keeps_imports_signature_and_docstring():
    """The imports stay: grading runs the solution cell alone, so a student who fills in the stub needs them."""
    solution = '# Hint: think.\nimport torch\n\n\ndef f(a, b=2):\n    """Doc."""\n    return a + b\n'
    assert assignments.stub(solution) == \
        'import torch\n\n\ndef f(a, b=2):\n    """Doc."""\n    raise NotImplementedError(\'think.\')'
    assert assignments.stub(solution.replace("import torch\n", "")) == \
        'def f(a, b=2):\n    """Doc."""\n    raise NotImplementedError(\'think.\')'
    with pytest.raises(ValueError, match="must start with a '# Hint: ...' line"):
        assignments.stub("def f():\n    return 1\n")


def test_a_hint_over_several_comment_lines_is_kept_whole():
    """Chapter 5's hints span two comment lines; the stub's message holds both (issue 40: cut-off hints)."""
    solution = "# Hint: position i may see positions 0..i; torch.tril of a\n# boolean matrix keeps them.\n" \
               "import torch\n\n\ndef f(T):\n    \"\"\"Doc.\"\"\"\n    return T  # not part of the hint\n"
    assert assignments.hint_of(solution) == "position i may see positions 0..i; torch.tril of a boolean matrix keeps them."
    assert "keeps them." in assignments.stub(solution) and "not part" not in assignments.stub(solution)
    for path in NOTEBOOKS:  # the student's stubs fit the page like every code line of the book
        for _, source, _, _ in solution_cells(path):
            wide = [line for line in assignments.stub(source).splitlines() if len(line) > 79]
            assert not wide, f"{path.name}: stub lines wider than 79 columns: {wide}"


def test_checks_live_one_module_per_chapter_and_name_what_they_forbid():
    """`course/checks/chNN.py` registers only chapter NN's exercises; every forbidden name is a dotted path
    to something that exists (a typo would forbid nothing)."""
    import importlib

    numbers = [int(module.__name__[-2:]) for module in checks.CHAPTERS]
    assert numbers == sorted(set(numbers)), "one module per chapter, in the chapters' order"
    for number, module in zip(numbers, checks.CHAPTERS, strict=True):
        assert module.CHECKS and all(name.startswith(f"ch{number}.") for name in module.CHECKS), module.__name__
    for name, entry in checks.CHECKS.items():
        assert isinstance(entry.forbidden, tuple), name
        for dotted in entry.forbidden:
            owner, attribute = dotted.rsplit(".", 1)
            parts = owner.split(".")
            for split in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
                try:
                    target = importlib.import_module(".".join(parts[:split]))
                except ImportError:
                    continue
                for part in parts[split:]:
                    target = getattr(target, part)
                break
            assert callable(getattr(target, attribute)), f"{name}: {dotted} is not callable"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name[:2])
def test_every_graded_exercise_names_what_it_may_not_call(path):
    """COORD rule 3 (issue 33): the exercise's markdown has a "Write it yourself" line naming every dotted
    name of its check's forbidden tuple, so the student reads what the grader switches off."""
    from attention_book.course import export

    for exercise in export.graded_exercises(nbformat.read(path, as_version=4)):
        forbidden = checks.CHECKS[exercise["name"]].forbidden
        if forbidden:
            assert "**Write it yourself:**" in exercise["text"], exercise["label"]
        missing = [name for name in forbidden if f"`{name}`" not in exercise["text"]]
        assert not missing, f"{path.name}, exercise {exercise['label']}: its markdown does not name {missing}"


def test_stored_feedback_is_what_the_chapters_and_checks_give(tmp_path):
    """data/feedback/ (the students' instant feedback without the checks) is regenerated from the chapters'
    solutions and the checks; a change to either without `python -m attention_book.course feedback chapters`
    fails here."""
    from attention_book.course import feedback

    written = feedback.record(NOTEBOOKS[0].parent, tmp_path)
    assert sorted(p.name for p in written) == sorted(p.name for p in feedback.FOLDER.glob("*.json"))
    for path in written:
        assert path.read_text() == (feedback.FOLDER / path.name).read_text(), f"{path.name} is stale"


TYPE_ONLY = {"ch1.encode"}  # WRONG differs in type only (a list for a tensor): the replay compares values


@pytest.fixture
def student_install(monkeypatch):
    """`check` as in the package students install, which leaves out attention_book.course.checks."""
    from attention_book.course import feedback

    monkeypatch.setattr(feedback, "_full_checks", lambda: None)
    return feedback


@pytest.mark.parametrize(("chapter", "label", "solution", "name", "function"), GRADED, ids=lambda v: str(v)[:30])
def test_without_the_checks_instant_feedback_still_works(student_install, chapter, label, solution, name, function,
                                                          capsys):
    """The reference passes with the very message the chapters print, the stub fails with its hint, and the
    wrong answer of WRONG fails saying where."""
    from attention_book.course import check

    reference = define(solution, function)
    capsys.readouterr()
    check(name, reference)
    assert capsys.readouterr().out == f"✓ {name}: passed on {checks.CASES} random cases\n"
    stub = student_install.evaluate(name, define(assignments.stub(solution), function))
    assert not stub.passed and stub.message.startswith("not implemented yet. Hint:")
    if name in TYPE_ONLY:
        return
    wrong = student_install.evaluate(name, WRONG[name][0])
    assert not wrong.passed and re.match(r"case \d+ of \d+, inputs \(|your function raised", wrong.message), wrong.message
    with pytest.raises(ValueError, match="needs the grader's checks"):
        student_install.evaluate(name, reference, seed=1)


def test_the_package_students_install_leaves_the_checks_out(tmp_path):
    """The wheel (what `pip install "attention-book @ git+..."` installs) has the stored feedback and no
    reference answers."""
    import zipfile
    from pathlib import Path

    import shutil

    root, source = Path(__file__).resolve().parents[1], tmp_path / "source"  # a copy: no stale build/ folder
    shutil.copytree(root / "src", source / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, source / name)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                            str(tmp_path), str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    names = zipfile.ZipFile(next(tmp_path.glob("*.whl"))).namelist()
    assert "attention_book/course/feedback.py" in names and "attention_book/data/feedback/ch5.json" in names
    assert not [n for n in names if "course/checks" in n], "the grader's checks are in the students' package"


def test_the_student_edition_has_no_solutions_and_its_buttons_open_student_notebooks(tmp_path):
    """The book's student edition: no solution code or written solution anywhere (removed, not folded), the
    other cells' outputs kept, and its repository (hence Colab) buttons point at where the teacher publishes
    it, or are removed when there is no such place."""
    root = NOTEBOOKS[0].parent.parent
    edition = tmp_path / "edition"
    written = assignments.make_student_edition(root, edition, "https://github.com/teacher/course", "spring",
                                               "book")
    assert sorted(p.name for p in written) == sorted(p.name for p in NOTEBOOKS)
    for path in NOTEBOOKS:
        student = nbformat.read(edition / "chapters" / path.name, as_version=4)
        text = "\n".join(c.source for c in student.cells)
        assert not any(label_of(c, "solution") for c in student.cells), f"{path.name}: a solution leaked"
        for _, solution, _, _ in solution_cells(path):
            assert solution.split('"""')[-1].strip() not in text
        teacher = nbformat.read(path, as_version=4)
        kept = sum(bool(c.get("outputs")) for c in student.cells if c.cell_type == "code")
        assert kept >= sum(bool(c.get("outputs")) for c in teacher.cells if c.cell_type == "code") - len(
            solution_cells(path)), f"{path.name}: outputs of cells other than solutions were dropped"
    config = (edition / "_config.yml").read_text()
    assert "url: https://github.com/teacher/course" in config and 'path_to_book: "book"' in config
    assert "branch: spring" in config and "attention-from-scratch/attention-book" not in config
    bare = assignments.make_student_edition(root, tmp_path / "bare")
    config = (tmp_path / "bare" / "_config.yml").read_text()
    assert 'colab_url: ""' in config and "use_repository_button: false" in config and bare


def _merge_partials_unguarded(m_a, l_a, acc_a, m_b, l_b, acc_b):
    """Chapter 9's merge without the −∞ guard: two empty partials give exp(−∞ + ∞) = NaN."""
    m = torch.maximum(m_a, m_b)
    scale_a, scale_b = torch.exp(m_a - m), torch.exp(m_b - m)
    return m, l_a * scale_a + l_b * scale_b, acc_a * scale_a + acc_b * scale_b


def test_ch9_merge_grader_refuses_code_without_the_guard():
    """Issue 44: the grader once passed this, which gives NaN on masked or empty blocks."""
    result = checks.evaluate("ch9.merge_partials", _merge_partials_unguarded)
    assert not result.passed
    assert re.search(r"NaN.*subtract 0", result.message), result.message


def _cached_forward_by_hand(tokens, w, keys, values, start):
    """Chapter 7's one-head cached forward with its new tokens placed from position `start`: 0 is the
    offset bug (the right answer places them after the keys.shape[-2] cached positions)."""
    S, T = keys.shape[-2], tokens.shape[-1]
    h = w["tokens"][tokens] + w["positions"][torch.arange(start, start + T)]  # (B, T, E)
    keys = torch.cat([keys, h @ w["key"]], dim=-2)  # (B, S + T, E)
    values = torch.cat([values, h @ w["value"]], dim=-2)
    scores = (h @ w["query"]) @ keys.mT / h.shape[-1] ** 0.5  # (B, T, S + T)
    scores = scores.masked_fill(~torch.ones(T, S + T, dtype=torch.bool).tril(S), float("-inf"))
    return (h + torch.softmax(scores, -1) @ values) @ w["head"], keys, values


def test_ch9_backward_tiles_match_every_query_key_pair():
    """The reference of ch9.backward_skips against the mask itself: a tile is visited when some query of the
    block sees some key of the block, masked when some other pair is kept apart (T < S and T = S)."""
    for T in range(1, 12):
        for S in range(T, 14):
            for block_q in range(1, 5):
                for block_k in range(1, 5):
                    for j in range(0, S, block_k):
                        expected = []
                        for i in range(0, T, block_q):
                            seen = [S - T + a >= b for a in range(i, min(i + block_q, T))
                                    for b in range(j, min(j + block_k, S))]
                            if any(seen):
                                expected.append((i, not all(seen)))
                        assert ch09.backward_tiles(T, S, block_q, block_k, j) == expected, (T, S, block_q, block_k, j)


def _skipping(T, S, block_q, block_k, j, visit="last", masked="last key"):
    """Wrong answers to ch9.backward_skips: a query block visited when its first query sees key j (`visit`
    "first"), or every block ("all"); the mask flag from the first key, or always set."""
    offset, last_key, found = S - T, min(j + block_k, S) - 1, []
    for i in range(0, T, block_q):
        first, last = offset + i, offset + min(i + block_q, T) - 1
        if visit == "all" or (first if visit == "first" else last) >= j:
            found.append((i, {"last key": last_key > first, "first key": j > first, "always": True}[masked]))
    return found


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"visit": "first"}, r"query block \d+ \(positions -?\d+ … \d+\) holds a query at or after key \d+"),
    ({"visit": "all"}, r"query block \d+ \(positions -?\d+ … -?\d+\) lies wholly before key \d+: every score of"),
    ({"masked": "first key"}, r"needs the mask: a tile is masked when its last key"),
    ({"masked": "always"}, r"needs no mask: a tile is masked when its last key")])
def test_ch9_backward_skips_feedback(kwargs, message):
    result = checks.evaluate("ch9.backward_skips", lambda *args: _skipping(*args, **kwargs))
    assert not result.passed
    assert re.search(message, result.message), result.message
    assert checks.evaluate("ch9.backward_skips", _skipping).passed


def test_ch9_graders_refuse_the_brute_force():
    """A right answer read off the whole (T, S) mask, and dZ from each row's (S, S) Jacobian, skip the method
    the exercises ask for: the graders measure the largest tensor made."""
    def from_the_mask(T, S, block_q, block_k, j):
        seen = torch.ones(T, S, dtype=torch.bool).tril(S - T)
        found = []
        for i in range(0, T, block_q):
            tile = seen[i:i + block_q, j:j + block_k]
            if tile.any():
                found.append((i, not bool(tile.all())))
        return found

    def from_the_jacobian(z, v, d_o):
        p = torch.softmax(z, -1)
        jacobian = torch.diag_embed(p) - p[:, :, None] * p[:, None, :]  # (T, S, S)
        return torch.einsum("ts,tsk->tk", d_o @ v.T, jacobian)

    for name, function in (("ch9.backward_skips", from_the_mask), ("ch9.score_gradient", from_the_jacobian)):
        result = checks.evaluate(name, function)
        assert not result.passed, name
        assert re.search(r"your function made a tensor of \d+ elements", result.message), result.message
    for name, function in (("ch9.backward_skips", from_the_mask), ("ch9.score_gradient", from_the_jacobian)):
        relaxed = dataclasses.replace(checks.CHECKS[name], largest=None)
        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(checks.CHECKS, name, relaxed)
            assert checks.evaluate(name, function).passed, name  # right, so only the method fails it


@pytest.mark.parametrize(("wrong", "message"), [
    (lambda z, v, d_o: torch.softmax(z, -1) * (d_o @ v.T - (d_o @ v.T).sum(-1, keepdim=True)),
     r"D_i = Σ_k dP_ik misses the weights"),
    (lambda z, v, d_o: torch.softmax(z, -1) * (d_o @ v.T - (torch.softmax(z, -1) * (d_o @ v.T)).sum(0)),
     r"D sums over the queries"),
    (lambda z, v, d_o: d_o @ v.T - (d_o * (torch.softmax(z, -1) @ v)).sum(-1, keepdim=True),
     r"dP − D misses the factor P_ij"),
    (lambda z, v, d_o: torch.softmax(z, -1) * (d_o @ v.T - (d_o * (torch.softmax(z, -1) @ v)).sum(-1, keepdim=True))
     * (z - z + 1), r"dZ has NaN where a score is −∞")])
def test_ch9_score_gradient_feedback(wrong, message):
    result = checks.evaluate("ch9.score_gradient", wrong)
    assert not result.passed
    assert re.search(message, result.message), result.message


def test_ch9_score_gradient_grader_switches_off_tensor_backward():
    """As for the tiled backward it replaces (round 2): out.backward(d_o) is refused too."""
    assert {"torch.Tensor.backward", "torch.autograd.backward", "torch.autograd.grad"} <= set(
        checks.CHECKS["ch9.score_gradient"].forbidden)

    def through_autograd(z, v, d_o):
        x = z.clone().requires_grad_()
        (torch.softmax(x, -1) @ v).backward(d_o)
        return x.grad

    result = checks.evaluate("ch9.score_gradient", through_autograd)
    assert not result.passed and "backward is switched off" in result.message, result.message


@pytest.mark.parametrize(("wrong", "message"), [
    (lambda d, element, budget, stages: ch09.best_blocks(d, element, budget * 2, stages),
     r"needs \d+ bytes, more than the budget|not even \(16, 16\) fits \(\d+ bytes\): return None"),
    (lambda d, element, budget, stages: ch09.best_blocks(d, 1, budget, stages),
     r"more than the budget: multiply by the bytes of an element"),
    (lambda d, element, budget, stages: min(((q, k) for q in ch09.BLOCKS for k in ch09.BLOCKS if k <= q and
                                             ch09.shared_bytes(q, k, d, element, stages) <= budget),
                                            key=lambda b: (-b[1], b[0]), default=None),
     r"block_q = \d+ fits too and rereads K and V fewer times"),
    (lambda d, element, budget, stages: None if ch09.best_blocks(d, element, budget, stages) is None else
     (ch09.best_blocks(d, element, budget, stages)[0], 16), r"block_k = \d+ still fits: take the largest block_k"),
    (lambda d, element, budget, stages: ch09.best_blocks(d, element, budget, stages) or (16, 16),
     r"not even \(16, 16\) fits \(\d+ bytes\): return None")])
def test_ch9_block_sizes_feedback(wrong, message):
    result = checks.evaluate("ch9.block_sizes", wrong)
    assert not result.passed
    assert re.search(message, result.message), result.message


def test_ch9_block_sizes_reference_at_the_kernels_budget():
    """At an H100's 227 KiB in fp16 with d = 128 and 3 stages the rule picks (256, 64), 160 KiB, what the
    exercise's solution says; the kernel's default (128, 64) needs 128 KiB by the same count."""
    from attention_book.course.checks.ch09 import best_blocks, shared_bytes

    assert best_blocks(128, 2, 227 * 1024, 3) == (256, 64)
    assert shared_bytes(256, 64, 128, 2, 3) == 160 * 1024 and shared_bytes(128, 64, 128, 2, 3) == 128 * 1024
    assert best_blocks(256, 4, 48 * 1024, 4) is None


def test_an_exact_bandwidth_fit_passes_at_every_seed():
    """A least-squares line through nearly collinear points is also close to the reversed fit (bytes against
    seconds): ch7.fit_bandwidth once named a right answer "reversed" at 7 of 40 seeds."""
    def fit_bandwidth(cache_bytes, seconds):
        x, y = cache_bytes - cache_bytes.mean(), seconds - seconds.mean()
        slope = (x * y).sum() / (x * x).sum()
        return seconds.mean() - slope * cache_bytes.mean(), 1 / slope

    failed = [seed for seed in range(40) if checks.CHECKS["ch7.fit_bandwidth"].run(fit_bandwidth, seed)]
    assert failed == []


def test_top_p_over_all_tokens_before_top_k_is_caught_by_name():
    """Exercise 12.3's order: top-p measured on the full softmax and then cut to the top k keeps other
    tokens than top-p over the k survivors' renormalised probabilities; the check's own cases separate the
    two for every seed and say which (a learner's wrong answer passed before them)."""
    def unrenormalised(logits, top_k=None, top_p=None):
        kept = torch.isfinite(top_k_top_p(logits, None, top_p)) if top_p is not None else torch.isfinite(logits)
        if top_k is not None:
            kept &= torch.isfinite(top_k_top_p(logits, top_k, None))
        return logits.masked_fill(~kept, float("-inf"))

    for seed in range(5):
        assert ch12.check_filter_logits(top_k_top_p, seed) is None
        message = ch12.check_filter_logits(unrenormalised, seed)
        assert message is not None and "apply top-k first" in message, (seed, message)


def test_block_without_scaling_and_loss_that_overflows_get_their_own_feedback():
    """Exercises 12.1 and 12.2, from a learner's read: a block whose scores are not divided by sqrt(d_k) is
    told so (it got only a wrong number), and a loss taken as log(sum(exp)) without the maximum, which
    overflows on large logits, is told to use log_softmax (it passed)."""
    def unscaled_block(x, w, H):
        return ch12.block_variants(_block(w, H), x)["no scaling"]

    def naive_loss(logits, tokens):
        p = logits[:, :-1].exp() / logits[:, :-1].exp().sum(-1, keepdim=True)  # overflows past about 88
        return -p.gather(-1, tokens[:, 1:, None]).log().mean()

    message = ch12.check_block(unscaled_block)
    assert message is not None and "divide q·k by sqrt(d_k)" in message, message
    message = ch12.check_lm_loss(naive_loss)
    assert message is not None and "exp overflows" in message, message
    assert ch12.check_lm_loss(lambda logits, tokens: torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())) is None


def test_filter_logits_that_changes_its_input_is_refused():
    """Exercise 12.3: an answer that writes -inf into the caller's logits (a learner's answer passed before)
    gets feedback saying so; the same filtering on a copy passes."""
    def in_place(logits, top_k=None, top_p=None):
        return logits.copy_(top_k_top_p(logits, top_k, top_p))

    def on_a_copy(logits, top_k=None, top_p=None):
        return in_place(logits.clone(), top_k, top_p)

    assert ch12.check_filter_logits(on_a_copy) is None
    message = ch12.check_filter_logits(in_place)
    assert message is not None and "changed the logits it was given" in message, message


def test_head_ablation_mistakes_get_their_own_feedback():
    """Exercise 12.4: a missing causal mask, kept heads scaled up, and zeroing only W_V's rows (the value
    bias still flows) each get a message naming the mistake, not only the first wrong number."""
    def model(w, H):
        mha = attention_book.multihead.MultiHeadAttention(w["q_proj.weight"].shape[1], H)
        mha.load_state_dict(w)
        return mha

    def zero_value_rows(x, w, H, head):
        w, d = dict(w), w["q_proj.weight"].shape[1] // H
        w["v_proj.weight"] = w["v_proj.weight"].clone()
        w["v_proj.weight"][head * d:(head + 1) * d] = 0
        return ch12.attention_without(model(w, H), x, [])

    wrong = {
        "every query sees every key": lambda x, w, H, h: ch12.attention_without(model(w, H), x, [h], causal=False),
        "the kept heads were scaled up": lambda x, w, H, h: ch12.attention_without(model(w, H), x, [h], rescale=True),
        "the head still writes its value bias": zero_value_rows,
    }
    assert ch12.check_without_head(lambda x, w, H, h: ch12.attention_without(model(w, H), x, [h])) is None
    for expected, answer in wrong.items():
        message = ch12.check_without_head(answer)
        assert message is not None and expected in message, (expected, message)


def test_first_leak_with_a_relative_test_fails_on_every_seed():
    """Exercise 5.6: torch.allclose's default tolerance is relative, so float32 rounding on an output near 0
    reads as a leak; every seed holds such a case, so the notebook's check and the grade agree."""
    def relative(full, prefixes):
        return next((t for t, run in enumerate(prefixes) if not torch.allclose(run[-1], full[t])), None)

    def absolute(full, prefixes):
        return next((t for t, run in enumerate(prefixes) if (run[-1] - full[t]).abs().max() > 1e-5), None)

    for seed in range(5):
        assert checks.ch05.check_first_leak(absolute, seed) is None
        message = checks.ch05.check_first_leak(relative, seed)
        assert message is not None and "float32 rounding" in message, (seed, message)
