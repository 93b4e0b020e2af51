"""Chapter 9's trained heads: the stored weights reproduce the stored metrics, training is deterministic,
and the task, the scores and the cached forward pass mean what the chapter says."""

import json
from importlib import resources

import pytest
import torch

from attention_book.induction import (
    POSITION_KINDS,
    AttentionOnly,
    InductionConfig,
    TrainConfig,
    evaluate,
    evaluation_batch,
    induction_score,
    load_trained,
    previous_token_score,
    repeated_tokens,
    train,
)
from attention_book.kv_cache import KVCache

STORED = json.loads(resources.files("attention_book").joinpath("data", "induction.json").read_text())


@pytest.mark.parametrize("positions", POSITION_KINDS)
def test_stored_weights_reproduce_the_stored_metrics(positions):
    model, record = load_trained(positions)
    metrics = evaluate(model, *evaluation_batch(model.config))
    for name, stored in record["metrics"].items():
        torch.testing.assert_close(torch.tensor(metrics[name]), torch.tensor(stored), atol=2e-4, rtol=1e-4,
                                   msg=lambda m, name=name: f"{positions}, {name}: {m}")


def test_stored_weights_are_small_and_load_without_pickle():
    data = resources.files("attention_book").joinpath("data")
    for record in STORED["variants"].values():
        path = data.joinpath(record["weights"])
        assert len(path.read_bytes()) < 250_000
        with path.open("rb") as file:
            state = torch.load(file, weights_only=True)
        assert all(isinstance(t, torch.Tensor) for t in state.values())


def test_the_stored_curve_starts_where_a_fresh_model_with_the_seed_starts():
    """The script's first logged loss is step 0, before any update: reproducible from the seed alone."""
    config = InductionConfig(**STORED["variants"]["learned"]["config"])
    _, curve = train(config, TrainConfig(**{**STORED["train"], "steps": 0}))
    stored = STORED["variants"]["learned"]["curve"]
    assert curve["loss_first_half"][0] == pytest.approx(stored["loss_first_half"][0], abs=1e-4)
    assert curve["loss_repeated_half"][0] == pytest.approx(stored["loss_repeated_half"][0], abs=1e-4)


@pytest.mark.parametrize("positions", POSITION_KINDS)
def test_a_training_step_is_deterministic_for_a_seed(positions):
    config, short = InductionConfig(positions=positions), TrainConfig(steps=2, log_every=1)
    (first, curve1), (second, curve2) = train(config, short), train(config, short)
    assert curve1 == curve2
    for name, tensor in first.state_dict().items():
        assert torch.equal(tensor, second.state_dict()[name]), name
    torch.manual_seed(0)
    initial = AttentionOnly(config)  # the seed's initial weights, as train draws them
    assert torch.equal(initial.unembed.weight, train(config, TrainConfig(steps=0))[0].unembed.weight)
    assert not torch.equal(initial.unembed.weight, first.unembed.weight)  # and the two steps changed them
    other, _ = train(config, TrainConfig(steps=2, log_every=1, seed=1))
    assert not torch.equal(other.embedding.weight, first.embedding.weight)


def test_repeated_tokens_repeat_with_their_period():
    config = InductionConfig()
    tokens, periods = repeated_tokens(50, config, torch.Generator().manual_seed(0))
    assert tokens.shape == (50, 2 * config.half_length)
    assert periods.min() >= config.half_length // 2 and periods.max() <= config.half_length
    for row, n in zip(tokens, periods.tolist(), strict=True):
        assert torch.equal(row[n:], row[:len(row) - n])


def test_scores_of_hand_made_attention_patterns():
    T, n = 8, 4
    tokens = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 8]])
    previous = torch.zeros(1, 1, T, T)
    previous[0, 0, 0, 0] = 1.0
    previous[0, 0, torch.arange(1, T), torch.arange(T - 1)] = 1.0  # every query on the token before it
    induction = torch.zeros(1, 1, T, T)
    induction[0, 0, torch.arange(T), torch.arange(T)] = 1.0
    induction[0, 0, torch.arange(n, T - 1), torch.arange(1, n)] = 1.0  # query n + i on key i + 1
    induction[0, 0, n + 3, n + 3] = 0.0
    induction[0, 0, n + 3, 0] = 1.0  # query 7 (token 8) has no next token after its first occurrence in view
    assert previous_token_score(previous).tolist() == [1.0]
    assert previous_token_score(induction).tolist() == [0.0]
    assert induction_score(induction, tokens, torch.tensor([n])).tolist() == [0.75]
    assert induction_score(previous, tokens, torch.tensor([n])).tolist() == [0.0]


@pytest.mark.parametrize("positions", ["learned", "rope"])
def test_cached_forward_equals_the_full_forward(positions):
    model = AttentionOnly(InductionConfig(positions=positions)).eval()
    tokens, _ = repeated_tokens(2, model.config, torch.Generator().manual_seed(1))
    with torch.no_grad():
        full, _ = model(tokens)
        caches = [KVCache(tokens.shape[1]) for _ in model.layers]
        steps = [model(tokens[:, :5], caches=caches)[0]] + [model(tokens[:, t:t + 1], caches=caches)[0]
                                                             for t in range(5, tokens.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_ablating_a_head_removes_exactly_its_output():
    model = AttentionOnly(InductionConfig(num_layers=1)).eval()
    tokens, _ = repeated_tokens(2, model.config, torch.Generator().manual_seed(2))
    keep = torch.ones(1, 4)
    keep[0, 2] = 0.0
    with torch.no_grad():
        model.layers[0].out.weight[:, 32:48] = 0.0  # head 2's slice of the output projection
        torch.testing.assert_close(model(tokens, keep)[0], model(tokens)[0])


def test_bad_input():
    with pytest.raises(ValueError, match=r"positions must be one of .* got 'sinusoid'"):
        AttentionOnly(InductionConfig(positions="sinusoid"))
    with pytest.raises(ValueError, match=r"no trained model with positions='alibi'"):
        load_trained("alibi")
