"""Checks of chapter 1's graded exercises (tokens and embeddings); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import torch

from .common import case_generator, CASES, Check, matches, shape_problem, sizes, value_problem


def check_mix(mix_by_hand, seed: int = 0) -> str | None:
    """Chapter 1: x (T, E) and a temperature -> softmax(X Xᵀ / temperature) X, (T, E)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T, E = sizes(gen, 2, 8)
        x = torch.randn(T, E, generator=gen)
        temperature = float(torch.rand(1, generator=gen)) * 3 + 0.5
        got = mix_by_hand(x, temperature)
        if problem := shape_problem(got, (T, E), "the mixed vectors"):
            return problem
        scores = x @ x.T  # (T, T)
        expected = torch.softmax(scores / temperature, dim=-1) @ x
        if matches(got, expected):
            continue
        if matches(got, torch.softmax(scores, dim=-1) @ x):
            return f"the scores are not divided by the temperature ({temperature:.2f}) before the softmax"
        if matches(got, torch.softmax(scores / temperature, dim=0) @ x):
            return "the softmax runs down the columns (dim 0): each word's weights, a row, must sum to 1 (dim -1)"
        if matches(got, torch.softmax(scores / temperature, dim=-1)):
            return "these are the weights (T, T): the mixed vectors are the weights times x"
        return value_problem(got, expected, f"the mixed vectors for T={T}, E={E}, temperature "
                             f"{temperature:.2f}: row") or "wrong mixed vectors"
    return None


def check_running_mean(running_mean_by_hand, seed: int = 0) -> str | None:
    """Chapter 1: x (T, E) -> row t the mean of rows 0 … t, as one matrix product."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T, E = [n + 1 for n in sizes(gen, 2, 8)]
        x = torch.randn(T, E, generator=gen)
        got = running_mean_by_hand(x)
        lower = torch.ones(T, T).tril()  # (T, T)
        expected = (lower / lower.sum(-1, keepdim=True)) @ x
        if matches(got, expected):
            continue
        if matches(got, lower @ x):
            return "those are running sums: divide row t by the t + 1 rows it adds (each row of weights sums to 1)"
        if matches(got, (lower.T / lower.T.sum(-1, keepdim=True)) @ x):
            return "row t averages rows t … T − 1, the future: use the lower triangle (tril), not the upper"
        if matches(got, x.mean(0, keepdim=True).expand(T, E)):
            return "every row is the mean of all rows: row t may only average rows 0 … t"
        return value_problem(got, expected, f"the running means for T={T}, E={E}: row") or "wrong running means"
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
    "ch1.embed": Check(check_embed, "embed_by_hand",
          forbidden=("torch.nn.functional.embedding",)),
    "ch1.mix": Check(check_mix, "mix_by_hand",
          forbidden=("torch.nn.functional.scaled_dot_product_attention",
                     "attention_book.attention.scaled_dot_product_attention")),
    "ch1.running_mean": Check(check_running_mean, "running_mean_by_hand",
          forbidden=("torch.cumsum", "torch.Tensor.cumsum")),
}
