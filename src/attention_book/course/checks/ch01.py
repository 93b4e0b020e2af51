"""Checks of chapter 1's graded exercises (tokens and embeddings); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import torch

from .common import case_generator, CASES, Check, matches, shape_problem, sizes, spy_tensor, value_problem


def check_stable_softmax(stable_softmax_by_hand, seed: int = 0) -> str | None:
    """Chapter 1: scores s (R, S), some rows near +1000 and some near −1000 -> softmax over the last axis,
    without overflow."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        R, S = [m + 1 for m in sizes(gen, 2, 7)]
        R += 1  # at least two rows: one far above the other
        offsets = torch.randint(-1, 2, (R, 1), generator=gen).float() * 1000
        offsets[0], offsets[1] = 1000.0, -1000.0
        s = torch.randn(R, S, generator=gen) * 3 + offsets  # float32
        got = stable_softmax_by_hand(s.clone())
        if problem := shape_problem(got, (R, S), f"the weights for scores of shape {(R, S)}"):
            return problem
        expected = torch.softmax(s, dim=-1)
        if matches(got, expected):
            continue
        if isinstance(got, torch.Tensor) and torch.isnan(got).any():
            row = int(torch.isnan(got).any(dim=-1).nonzero()[0])
            top = float(s[row].max())
            if top > 88.7:
                return (f"row {row} has NaN: its scores reach {top:.0f}, exp overflows float32 (above about 88.7) "
                        f"to inf, and inf / inf is NaN; subtract each row's largest score before exp")
            return (f"row {row} has NaN: its largest score, {top:.0f}, lies far below the tensor's largest, "
                    f"{float(s.max()):.0f}, so after subtracting that every exp underflows to 0 and 0 / 0 is NaN; "
                    f"subtract each row's own max (keepdim=True)")
        if matches(got, torch.softmax(s, dim=0)):
            return "the softmax runs down the columns (dim 0): each row of scores, the last axis, must sum to 1"
        return value_problem(got, expected, f"the weights for scores of shape {(R, S)}: entry") or "wrong weights"
    return None


def check_embedding_grad(embedding_grad_by_hand, seed: int = 0) -> str | None:
    """Chapter 1: ids (T,), the gradient with respect to the looked-up embeddings (T, d) and the vocabulary
    size V -> the gradient with respect to the table, (V, d): row v sums the rows of the positions of v."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        V, d, T = [m + 1 for m in sizes(gen, 3, 7)]
        ids = torch.randint(0, V, (T + 1,), generator=gen)
        ids[-1] = ids[0]  # a token that occurs twice
        grad_out = torch.randn(T + 1, d, generator=gen)
        got = embedding_grad_by_hand(ids.clone(), grad_out.clone(), V)
        if problem := shape_problem(got, (V, d), f"the table's gradient for V={V}, d={d}"):
            return problem + " (one row per vocabulary entry)"
        expected = torch.zeros(V, d).index_add_(0, ids, grad_out)
        if matches(got, expected):
            continue
        repeated = int(ids[0])
        where = (ids == repeated).nonzero().flatten().tolist()
        if matches(got[repeated], grad_out[where[-1]]) or matches(got[repeated], grad_out[where[0]]):
            return (f"token {repeated} occurs at positions {where}: its row must be the sum of their gradients, "
                    f"yours keeps only one (an assignment grad[ids] = grad_out overwrites repeats; add them)")
        return value_problem(got, expected, f"the table's gradient for ids {ids.tolist()}: row") or "wrong gradient"
    return None


_LOOKUPS = {"__getitem__", "index_select", "gather", "take", "take_along_dim", "embedding", "select"}


def check_embed(embed_by_hand, seed: int = 0) -> str | None:
    """Chapter 1: ids (T,) and a table (V, d) -> the embeddings (T, d), row ids[t] of the table, computed
    as a one-hot matrix times the table: the table is lent as a tensor that notices an index into it."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        V, d, T = sizes(gen, 3, 9)
        table = torch.randn(V, d, generator=gen)
        ids = torch.randint(0, V, (T,), generator=gen)
        log = []
        got = embed_by_hand(ids, spy_tensor(table.clone(), log, _LOOKUPS))
        if isinstance(got, torch.Tensor):
            got = got.as_subclass(torch.Tensor)
        expected = table[ids]
        if problem := value_problem(got, expected, f"the embeddings of ids {ids.tolist()} ({V} × {d} table)"):
            return problem + "; position t gets row ids[t] of the table"
        if lookups := [name for kind, name in log if kind == "flagged"]:
            return (f"right rows, but read by indexing the table ({lookups[0]}): the exercise asks for the "
                    "one-hot matrix (T, V) times the table, the form that shows an embedding is a linear layer")
        if not any(kind == "product" for kind, _ in log):
            return ("right rows, but no matrix product used the table: multiply a one-hot (T, V) matrix by it "
                    "(one_hot @ table)")
    return None


CHECKS: dict[str, Check] = {
    "ch1.embed": Check(check_embed, "embed_by_hand",
          forbidden=("torch.nn.functional.embedding", "torch.nn.functional.one_hot")),
    "ch1.embedding_grad": Check(check_embedding_grad, "embedding_grad_by_hand",
          forbidden=("torch.autograd.grad", "torch.autograd.backward")),
    "ch1.stable_softmax": Check(check_stable_softmax, "stable_softmax_by_hand",
          forbidden=("torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax", "torch.special.softmax",
                     "torch.log_softmax", "torch.nn.functional.log_softmax", "torch.Tensor.log_softmax",
                     "torch.special.log_softmax")),
}
