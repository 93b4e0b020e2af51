"""Checks of chapter 2's graded exercises (self-attention); the registry entries at the end name each
exercise, the function its solution cell defines and what it may not call (see `..checks`)."""

import math

import torch

from .common import TENSORFLOW, case_generator, CASES, Check, matches, shape_problem, sizes, value_problem


def check_jacobian(softmax_jacobian_by_hand, seed: int = 0) -> str | None:
    """Chapter 2: scores s (S,) -> the Jacobian of softmax at s, (S, S): diag(w) − w wᵀ with w = softmax(s)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        (S,) = [m + 1 for m in sizes(gen, 1, 8)]
        s = torch.randn(S, generator=gen) * (float(torch.rand(1, generator=gen)) * 3 + 0.5)
        got = softmax_jacobian_by_hand(s.clone())
        if problem := shape_problem(got, (S, S), f"the Jacobian for S={S} scores"):
            return problem + " (∂w_i/∂s_j for every i and j)"
        expected = torch.autograd.functional.jacobian(lambda scores: torch.softmax(scores, dim=-1), s)
        if matches(got, expected):
            continue
        w = torch.softmax(s, dim=-1)
        if matches(got, -expected):
            return "the sign is flipped: ∂w_i/∂s_i = w_i (1 − w_i) is positive, so diag(w) − w wᵀ, not w wᵀ − diag(w)"
        if matches(got, torch.diag(s) - torch.outer(s, s)):
            return "you put the scores into the formula: it takes the weights, w = softmax(s)"
        if matches(got, torch.diag(w)):
            return ("only the diagonal's first term: every weight also depends on the other scores through "
                    "the softmax's denominator, which gives − w wᵀ")
        return value_problem(got, expected, f"the Jacobian for S={S}: entry") or "wrong Jacobian"
    return None


def score_variance(W_q, W_k, C) -> float:
    """Var(q·k / √d_k) for q = x W_q, k = y W_k and independent mean-0 inputs x, y of covariance C (E, E):
    tr(C M C Mᵀ) / d_k with M = W_q W_kᵀ (chapter 2's ‖M‖²_F / d_k when C = I)."""
    M = (W_q @ W_k.T).double()  # (E, E)
    C = C.double()
    return ((C @ M @ C @ M.T).trace() / W_q.shape[1]).item()


def check_score_variance(score_variance_by_hand, seed: int = 0) -> str | None:
    """Chapter 2: W_q, W_k (E, d_k) and the inputs' covariance C (E, E) -> the exact Var(q·k / √d_k)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        E, d_k = [m + 1 for m in sizes(gen, 2, 8)]
        E += 1  # at least 2: a covariance with correlations
        shift = float(torch.rand(1, generator=gen))  # a mean: correlated components, as with torch.rand
        W_q = torch.randn(E, d_k, generator=gen) + shift
        W_k = torch.randn(E, d_k, generator=gen) + shift
        A = torch.randn(E, E, generator=gen)
        C = A @ A.T / E + 0.1 * torch.eye(E)  # (E, E): symmetric, positive definite, far from I
        try:
            got = float(score_variance_by_hand(W_q.clone(), W_k.clone(), C.clone()))
        except (TypeError, ValueError, RuntimeError):
            return "return one number, the variance (a float or a 0-dimensional tensor)"
        expected = score_variance(W_q, W_k, C)
        if math.isclose(got, expected, rel_tol=1e-4):
            continue
        if math.isclose(got, expected * d_k, rel_tol=1e-4):
            return f"that is Var(q·k): the scaled scores q·k / √d_k have d_k = {d_k} times less"
        if math.isclose(got, score_variance(W_q, W_k, torch.eye(E)), rel_tol=1e-4):
            return ("that is the variance for unit-variance, uncorrelated inputs (C = I, the chapter's formula): "
                    "with covariance C, E[x_a x_a'] = C_aa', and it enters once for x and once for y")
        M = (W_q @ W_k.T).double()
        if math.isclose(got, ((C.double() @ M @ M.T).trace() / d_k).item(), rel_tol=1e-4):
            return "C enters twice, once for x and once for y: tr(C M C Mᵀ) / d_k, with M = W_q W_kᵀ"
        var_q = (W_q.T @ C @ W_q).trace().item() / d_k  # σ_q², the mean variance of q's components
        var_k = (W_k.T @ C @ W_k).trace().item() / d_k
        if math.isclose(got, var_q * var_k, rel_tol=1e-4):
            return ("that is σ_q²σ_k², exact only when the components of q (or of k) are uncorrelated with "
                    "equal variances; these are not")
        return (f"for E={E}, d_k={d_k} the variance is {expected:.4f}, yours is {got:.4f} (an estimate from "
                f"samples is off by its sampling error: compute it from the weights)")
    return None


def check_linear_port(linear_state_dict, seed: int = 0) -> str | None:
    """Chapter 2: weights (d_in, d_out) used as x @ W -> a state dict for three nn.Linear(d_in, d_out,
    bias=False) named q_proj, k_proj and v_proj that compute the same projections."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        d_in, d_k, d_v = [m + 1 for m in sizes(gen, 3, 7)]
        weights = {"q_proj": torch.randn(d_in, d_k, generator=gen), "k_proj": torch.randn(d_in, d_k, generator=gen),
                   "v_proj": torch.randn(d_in, d_v, generator=gen)}
        got = linear_state_dict(*(w.clone() for w in weights.values()))
        expected_keys = [f"{name}.weight" for name in weights]
        if not isinstance(got, dict) or sorted(got) != sorted(expected_keys):
            keys = sorted(got) if isinstance(got, dict) else type(got).__name__
            return f"return a dict with the keys {expected_keys} (a module's state dict), yours has {keys}"
        x = torch.randn(3, d_in, generator=gen)
        for name, W in weights.items():
            weight = got[f"{name}.weight"]
            d_out = W.shape[1]
            if tuple(getattr(weight, "shape", ())) != (d_out, d_in):
                flipped = " nn.Linear keeps (out, in): store W transposed" if tuple(weight.shape) == (d_in, d_out) else ""
                return (f"{name}.weight should have nn.Linear's shape (d_out, d_in) = {(d_out, d_in)}, "
                        f"yours has {tuple(weight.shape)};{flipped}")
            if matches(x @ weight.T, x @ W):
                continue
            if matches(weight, W):
                return f"{name}.weight is W itself: nn.Linear computes x Wᵀ with its weight, so store W transposed"
            return value_problem(x @ weight.T, x @ W, f"{name}(x) for d_in={d_in}, d_out={d_out}: entry") or \
                f"{name} computes another projection than x @ W"
    return None


def additive_scores(q, k, W_1, W_2, v_a):
    """Bahdanau's scores e[t, s] = tanh(q_t W_1 + k_s W_2) · v_a, (T, S)."""
    return torch.tanh((q @ W_1)[:, None, :] + (k @ W_2)[None, :, :]) @ v_a


def check_additive(additive_scores_by_hand, seed: int = 0) -> str | None:
    """Chapter 2: queries (T, d_q), keys (S, d_k), W_1 (d_q, h), W_2 (d_k, h), v_a (h,) -> scores (T, S)."""
    for case in range(CASES):
        gen = case_generator(seed, case)
        T, S, d_q, d_k, h = [m + 1 for m in sizes(gen, 5, 6)]
        q, k = torch.randn(T, d_q, generator=gen), torch.randn(S, d_k, generator=gen)
        W_1, W_2 = torch.randn(d_q, h, generator=gen), torch.randn(d_k, h, generator=gen)
        v_a = torch.randn(h, generator=gen)
        got = additive_scores_by_hand(q, k, W_1, W_2, v_a)
        if problem := shape_problem(got, (T, S), "the scores"):
            return problem + " (one score per query and key: broadcast (T, 1, h) against (1, S, h))"
        expected = additive_scores(q, k, W_1, W_2, v_a)
        if matches(got, expected):
            continue
        if matches(got, ((q @ W_1)[:, None, :] + (k @ W_2)[None, :, :]) @ v_a):
            return "the tanh is missing: the hidden layer is tanh(q W_1 + k W_2), then · v_a"
        if matches(got, torch.tanh(((q @ W_1)[:, None, :] + (k @ W_2)[None, :, :]) @ v_a)):
            return "the tanh comes before v_a: tanh(q W_1 + k W_2) · v_a, not tanh((q W_1 + k W_2) · v_a)"
        if matches(got, torch.softmax(expected, dim=-1)):
            return "these are the weights: the exercise asks for the scores before the softmax"
        return value_problem(got, expected, f"the scores for T={T}, S={S}, h={h}: entry") or "wrong scores"
    return None


CHECKS: dict[str, Check] = {
    "ch2.jacobian": Check(check_jacobian, "softmax_jacobian_by_hand",
          forbidden=("torch.autograd.functional.jacobian", "torch.func.jacrev", "torch.func.jacfwd")),
    "ch2.score_variance": Check(check_score_variance, "score_variance_by_hand",
          forbidden=()),  # nothing in the package or the libraries computes it
    "ch2.linear_port": Check(check_linear_port, "linear_state_dict",
          forbidden=()),  # the answer is a layout: no library function to switch off
    "ch2.additive": Check(check_additive, "additive_scores_by_hand",
          forbidden=("keras.layers.AdditiveAttention",),
          imports=TENSORFLOW),
}
