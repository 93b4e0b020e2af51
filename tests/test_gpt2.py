"""Chapter 7: the package's Decoder holding a Hugging Face GPT-2's weights computes what transformers
computes. Models are built from GPT2Config with random weights: nothing is downloaded."""

import ast
import statistics
from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

import attention_book
from attention_book.decoder import Decoder, DecoderConfig, from_gpt2, generate, gpt2_name_map
from attention_book.measure.gpt2 import NEEDS_HUB, gpt2_generation

# GPT-2's own initial weights (std 0.02 or less) are so small that a random model repeats one token whatever its
# blocks compute; at 0.4 the blocks decide, and a weight in the wrong place changes the greedy tokens.
SMALL = {"n_layer": 2, "n_embd": 48, "n_head": 4, "vocab_size": 97, "n_positions": 64, "initializer_range": 0.4}


def gpt2(seed: int = 0, tie: bool = True, **sizes) -> GPT2LMHeadModel:
    """A random GPT-2 whose LayerNorms and biases are disturbed from their initial 1 and 0, so that a
    weight copied to the wrong place, or not at all, changes the logits."""
    torch.manual_seed(seed)
    config = GPT2Config(**(sizes or SMALL), tie_word_embeddings=tie, bos_token_id=None, eos_token_id=None)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 1:  # ln_1, ln_2, ln_f and every bias
                parameter.add_(0.5 * torch.randn_like(parameter))
    return model


def largest_logit_difference(hf: GPT2LMHeadModel, ours: Decoder, tokens: torch.Tensor) -> float:
    with torch.inference_mode():
        return (ours(tokens) - hf(tokens).logits).abs().max().item()


def tokens(shape, seed=1, vocab=SMALL["vocab_size"]):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("tie", [True, False])
def test_logits_equal_transformers(tie, seed):
    hf = gpt2(seed, tie)
    ours = from_gpt2(hf.state_dict(), num_heads=4)
    assert ours.config == DecoderConfig(vocab_size=97, context_length=64, embed_dim=48, num_heads=4, num_layers=2,
                                        tie_head=tie)
    assert largest_logit_difference(hf, ours, tokens((2, 40), seed)) < 1e-5


def test_logits_equal_at_gpt2_124m_shapes():
    hf = gpt2(0, tie=True, **{"n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024})
    ours = from_gpt2(hf.state_dict(), num_heads=12)
    assert sum(p.numel() for p in ours.parameters()) == 124_439_808  # GPT-2 small, head tied
    assert ours.head.weight is ours.token_embedding.weight
    assert largest_logit_difference(hf, ours, tokens((1, 6), vocab=50257)) < 1e-4


def test_a_state_dict_without_the_head_ties_it():
    hf = gpt2(2, tie=True)
    state = {name: t for name, t in hf.state_dict().items() if name != "lm_head.weight"}  # as the hub stores it
    ours = from_gpt2(state, num_heads=4)
    assert ours.config.tie_head and ours.head.weight is ours.token_embedding.weight
    assert largest_logit_difference(hf, ours, tokens((2, 20))) < 1e-5


def test_an_untied_head_keeps_its_own_weight():
    hf = gpt2(3, tie=False)
    ours = from_gpt2(hf.state_dict(), num_heads=4)
    assert not ours.config.tie_head
    assert torch.equal(ours.head.weight, hf.lm_head.weight)
    assert not torch.equal(ours.head.weight, ours.token_embedding.weight)
    assert largest_logit_difference(hf, ours, tokens((2, 20), 3)) < 1e-5


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("tie", [True, False])
def test_greedy_tokens_equal_transformers_generate(tie, seed):
    hf = gpt2(seed, tie)
    ours = from_gpt2(hf.state_dict(), num_heads=4)
    prompt = tokens((1, 5), seed)
    expected = hf.generate(prompt, max_new_tokens=50, do_sample=False)
    with torch.inference_mode():  # the comparison means something only if no choice is a near-tie
        top2 = hf(expected).logits[0, 4:-1].topk(2).values  # (50, 2): the logits each step chose from
    assert (top2[:, 0] - top2[:, 1]).min() > 1e-4
    assert torch.equal(generate(ours, prompt, 50, use_cache=True), expected)


def test_the_weights_keep_the_state_dicts_dtype():
    hf = gpt2(4).to(torch.bfloat16)
    ours = from_gpt2(hf.state_dict(), num_heads=4)
    assert {p.dtype for p in ours.parameters()} == {torch.bfloat16}
    with torch.inference_mode():  # bfloat16 keeps 3 significant digits: rounding differs by about 1%
        logits, expected = ours(tokens((2, 20), 4)), hf(tokens((2, 20), 4)).logits  # (B, T, V)
    assert (logits - expected).abs().max() < 0.05 * expected.abs().max()


@pytest.mark.parametrize("num_layers", [1, 3])
def test_the_name_map_covers_every_parameter_once(num_layers):
    ours = [name for _, names in gpt2_name_map(num_layers).values() for name in names] + ["head.weight"]
    model = Decoder(DecoderConfig(vocab_size=5, context_length=4, embed_dim=8, num_heads=2, num_layers=num_layers))
    assert sorted(ours) == sorted(name for name, _ in model.named_parameters())


def test_old_checkpoints_causal_mask_buffers_are_ignored():
    hf = gpt2(5)
    state = dict(hf.state_dict())
    for i in range(2):  # transformers before 4.3x saved these with the weights
        state[f"transformer.h.{i}.attn.bias"] = torch.ones(1, 1, 64, 64).tril()
        state[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    assert largest_logit_difference(hf, from_gpt2(state, num_heads=4), tokens((1, 10))) < 1e-5


def test_a_missing_tensor_is_named():
    state = dict(gpt2().state_dict())
    del state["transformer.h.1.mlp.c_fc.bias"]
    with pytest.raises(ValueError, match=r"missing \['transformer.h.1.mlp.c_fc.bias'\]"):
        from_gpt2(state, num_heads=4)


def test_a_missing_block_is_named():
    state = {name: t for name, t in gpt2(n_layer=3, **{k: v for k, v in SMALL.items() if k != "n_layer"})
             .state_dict().items() if not name.startswith("transformer.h.1.")}
    with pytest.raises(ValueError, match=r"3 blocks.*missing \['transformer.h.1.ln_1.weight', .* and 4 more"):
        from_gpt2(state, num_heads=4)


def test_an_unexpected_tensor_is_named():
    state = dict(gpt2().state_dict())
    state["transformer.h.0.attn.rotary.inv_freq"] = torch.ones(6)
    with pytest.raises(ValueError, match=r"unexpected \['transformer.h.0.attn.rotary.inv_freq'\]"):
        from_gpt2(state, num_heads=4)


def test_a_wrong_shape_names_the_tensor_expected_and_actual():
    state = gpt2(**SMALL, n_inner=100).state_dict()  # an MLP 100 wide, not 4E = 192
    with pytest.raises(ValueError, match=r"transformer.h.0.mlp.c_fc.weight must be \(E, 4E\) = \(48, 192\), "
                                         r"got \(48, 100\)"):
        from_gpt2(state, num_heads=4)


@pytest.mark.parametrize("num_heads", [5, 0, -4, 2.0, True])
def test_num_heads_must_divide_the_width(num_heads):
    with pytest.raises(ValueError, match=rf"num_heads={num_heads!r} .* E=48 of transformer.wte.weight \(97, 48\)"):
        from_gpt2(gpt2().state_dict(), num_heads=num_heads)


def test_a_state_dict_that_is_not_gpt2s():
    state = Decoder(DecoderConfig(vocab_size=5, context_length=4, embed_dim=8, num_heads=2, num_layers=1)).state_dict()
    with pytest.raises(ValueError, match=r"not GPT-2's .* no transformer.wte.weight; its keys are \['blocks"):
        from_gpt2(state, num_heads=2)


def test_the_package_does_not_import_transformers():
    for path in Path(attention_book.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(m.split(".")[0] == "transformers" for m in modules), path


class ByteTokenizer:
    """GPT-2's tokenizer interface over bytes, for a model with a vocabulary of at least 256."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids: list[int]) -> str:
        return bytes(ids).decode(errors="replace")


def test_gpt2_generation_offline_says_it_needs_the_hub(capsys):
    assert gpt2_generation(None, None, "any prompt", 10) is None
    assert capsys.readouterr().out == NEEDS_HUB + "\n"
    assert len(NEEDS_HUB) <= 79


def test_gpt2_generation_prints_transformers_tokens_and_speed(capsys):
    hf = gpt2(6, **{**SMALL, "vocab_size": 256})
    result = gpt2_generation(hf.state_dict(), ByteTokenizer(), "The keys and values\nof a decoder", 30,
                             num_heads=4, width=40)
    prompt = torch.tensor([ByteTokenizer().encode("The keys and values\nof a decoder")])
    assert torch.equal(result["tokens"], hf.generate(prompt, max_new_tokens=30, do_sample=False))
    assert set(result["tokens_per_second"]) == {"with cache", "without cache"}
    assert all(rate > 0 for rate in result["tokens_per_second"].values())
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "GPT-2: 0 M parameters, 2 layers of 4 heads, a prompt of 32 tokens"
    assert lines[1].startswith("with cache   :") and lines[2].startswith("without cache:")
    assert lines[3] == "The keys and values"
    assert all(len(line) <= 40 for line in lines[3:]) and len(lines) > 4


def test_transformers_initial_weights_are_as_chapter_7_says():
    """Cell 54: std 0.02, and 0.02 / sqrt(2 * layers) for each block's two output projections."""
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=256, n_positions=1280, n_embd=256, n_layer=4, n_head=4)
    stds = {name: p.std().item() for name, p in GPT2LMHeadModel(config).named_parameters() if p.dim() == 2}
    scaled = {name for name in stds if name.endswith("c_proj.weight")}
    assert len(scaled) == 2 * config.n_layer
    for name, std in stds.items():
        expected = 0.02 / (2 * config.n_layer) ** 0.5 if name in scaled else 0.02
        assert std == pytest.approx(expected, rel=0.05), name


def test_the_stored_benchmark_holds_what_chapter_7_prints():
    from attention_book.measure import load_result

    bench = load_result("gpt2_generate_cpu")
    seconds = bench["seconds"]
    assert set(seconds) == {"package", "transformers", "transformers_static", "transformers_compiled"}
    for name, ratio in bench["ratio"].items():
        assert ratio == pytest.approx(seconds["package"] / seconds[name])
    rounds = bench["seconds_per_round"]  # every round's times: the spread chapter 7 prints
    assert all(len(times) == bench["rounds"] for times in rounds.values())
    for name, seconds_of_name in seconds.items():
        assert seconds_of_name == pytest.approx(statistics.median(rounds[name]))

    def per_round(method, baseline):
        ratios = [a / b for a, b in zip(rounds[method], rounds[baseline], strict=True)]
        return {"median": statistics.median(ratios), "lowest": min(ratios), "highest": max(ratios)}

    for name, spread in bench["ratio_per_round"].items():
        assert spread == pytest.approx(per_round("package", name))
    assert bench["compiled_over_static_per_round"] == pytest.approx(
        per_round("transformers_compiled", "transformers_static"))
    assert set(bench["first_call_seconds"]) == set(seconds)
    assert {"1 min", "5 min", "cores"} <= set(bench["load_before"]) & set(bench["load_after"])
    floor = max(bench["floor_seconds_per_token"].values())
    assert bench["floor_fraction"]["package"] == pytest.approx(floor / bench["seconds_per_token"]["package"])
    assert {"cpu", "threads", "transformers"} <= set(bench["machine"])
