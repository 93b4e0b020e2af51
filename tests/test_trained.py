"""Chapters 3 and 4's small trained models: training is deterministic, and the stored weights do what
the chapters say (a previous-token and a two-back head; an anti-diagonal cross-attention)."""

import torch

from attention_book.trained import (
    LookBackConfig,
    Reverser,
    ReverserConfig,
    TrainSettings,
    evaluation_tokens,
    load_lookback,
    load_reverser,
    lookback_accuracy,
    reverser_accuracy,
    train_lookback,
    train_reverser,
)

SHORT = TrainSettings(steps=5, batch_size=8)


def test_training_is_deterministic():
    """The same seed trains the same weights, bit for bit (the script relies on it)."""
    for train, config in ((train_lookback, LookBackConfig()), (train_reverser, ReverserConfig())):
        first, curve_1 = train(config, SHORT)
        second, curve_2 = train(config, SHORT)
        assert curve_1 == curve_2
        for (name, a), b in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
            assert torch.equal(a, b), name


def test_a_short_run_changes_the_weights():
    """The determinism test is not vacuous: training moves the weights away from their initial values."""
    torch.manual_seed(SHORT.seed)
    from attention_book.trained import LookBack

    initial = LookBack(LookBackConfig()).state_dict()
    trained, _ = train_lookback(LookBackConfig(), SHORT)
    assert not torch.equal(initial["attention.q_proj.weight"], trained.state_dict()["attention.q_proj.weight"])


def test_stored_lookback_heads_look_one_and_two_back():
    model, record = load_lookback()
    assert lookback_accuracy(model) == record["accuracy"]
    assert min(record["accuracy"].values()) > 0.99
    weights = model.head_weights(evaluation_tokens(model.config, 64)).mean(0)  # (H, T, T)
    T = model.config.length
    offsets = sorted(
        max((1, 2), key=lambda k: weights[h].diagonal(-k).mean().item()) for h in range(model.config.num_heads))
    assert offsets == [1, 2], "one head should look one back and the other two back"
    for h in range(model.config.num_heads):
        k = max((1, 2), key=lambda k: weights[h].diagonal(-k).mean().item())
        assert weights[h].diagonal(-k)[T // 2 - k:].min() > 0.9  # sharp, away from the first tokens


def test_stored_reverser_attends_anti_diagonally():
    model, record = load_reverser()
    assert reverser_accuracy(model) == record["accuracy"]
    assert record["accuracy"]["generated"] > 0.99
    source, target = evaluation_tokens(model.config, 64)
    with torch.no_grad():
        _, weights = model(source, target, need_weights=True)  # (B, T, S)
    S = model.config.length
    assert torch.equal(weights.mean(0).argmax(-1), torch.arange(S - 1, -1, -1))


def recomputing_generate(model, source):
    """Greedy decoding that runs the whole model, cross-attention keys and values included, through
    `nn`-style `MultiHeadAttention.forward` at every step: what `generate` must equal."""
    out = torch.full_like(source[..., :1], model.config.vocab_size)
    for _ in range(source.shape[-1]):
        memory = model.encode(source)
        positions = torch.arange(out.shape[-1])
        y = model.target_embedding(out) + model.target_positions(positions)
        y = y + model.decoder_attention(y, need_weights=False, is_causal=True)[0]
        crossed, _ = model.cross_attention(y, memory, memory, need_weights=False)
        logits = model.read_out(y + crossed)
        out = torch.cat([out, logits[..., -1:, :].argmax(-1)], dim=-1)
    return out[..., 1:]


def test_generate_makes_the_cross_keys_and_values_once_and_equals_recomputing_them():
    """Chapter 4: `generate` projects the memory to keys and values once per source, and its tokens and
    logits equal a decoder that recomputes them, through the module's own forward, at every step."""
    trained, _ = load_reverser()
    torch.manual_seed(0)
    untrained = Reverser(ReverserConfig()).eval()  # its ties and near-ties test more than the trained one
    for model in (trained, untrained):
        source, target = evaluation_tokens(model.config, 16)
        calls = []
        hooks = [model.cross_attention.k_proj.register_forward_hook(lambda *a, calls=calls: calls.append("k")),
                 model.cross_attention.v_proj.register_forward_hook(lambda *a, calls=calls: calls.append("v"))]
        generated = model.generate(source)
        for hook in hooks:
            hook.remove()
        assert calls == ["k", "v"], "the memory must be projected once, not at every step"
        with torch.no_grad():
            assert torch.equal(generated, recomputing_generate(model, source))
            memory = model.encode(source)
            y = torch.randn(16, 5, model.config.embed_dim)
            cached, _ = model.cross_attend(y, *model.cross_keys_values(memory))
            recomputed, _ = model.cross_attention(y, memory, memory, need_weights=False)
            torch.testing.assert_close(cached, recomputed, atol=1e-6, rtol=1e-5)
    assert not torch.equal(trained.generate(source), untrained.generate(source))  # not vacuous
