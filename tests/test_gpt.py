"""Chapter 12's GPT: the corpus is the stored one or refused, training is deterministic, the stored weights
give the stored curves, sampling filters and the cache change nothing they should not, and an ablated
head writes exactly nothing."""

import hashlib
import json
import math

import pytest
import torch

from attention_book import gpt
from attention_book.course.checks.ch12 import attention_without, random_attention
from attention_book.decoder import Decoder
from attention_book.multihead import MultiHeadAttention

TINY = gpt.GPTTrainConfig(steps=3, batch_size=2, context_length=16, eval_every=1, eval_windows=2, warmup=2)


@pytest.fixture(scope="module")
def text():
    return gpt.corpus_text()


@pytest.fixture(scope="module")
def trained():
    return gpt.load_trained()


def test_the_corpus_is_the_stored_one(text):
    stored = json.loads(gpt.DATA.joinpath(gpt.CORPUS_FILE).read_text())
    assert len(text) == stored["characters"]
    assert hashlib.sha256(text.encode()).hexdigest() == stored["sha256"]
    assert len(set(stored["fingerprints"])) == len(stored["fingerprints"])  # each paragraph once


def test_a_python_with_an_edited_paragraph_is_refused():
    from pydoc_data.topics import topics

    edited = dict(topics)
    name = sorted(edited)[0]
    edited[name] = edited[name].replace("\n\n", "\n\n!", 1)  # one paragraph changes
    with pytest.raises(ValueError, match=r"lacks 1 of the \d+ paragraphs"):
        gpt.corpus_text(edited)


def test_shared_fingerprints_keep_what_every_version_has_in_the_first_ones_order():
    one = {"b": "x\n\ny", "a": "z\n\nx"}
    two = {"a": "y\n\nx", "c": "w"}
    assert gpt.shared_fingerprints([one, two]) == [gpt.fingerprint("x"), gpt.fingerprint("y")]


def test_encode_decode_round_trip_and_unknown_characters(text):
    vocab = gpt.vocabulary(text)
    assert gpt.decode(gpt.encode(text[:500], vocab), vocab) == text[:500]
    with pytest.raises(ValueError, match="outside the vocabulary"):
        gpt.encode("\x00", vocab)


def test_windows_shift_targets_by_one():
    ids = torch.arange(20)
    inputs, targets = gpt.windows(ids, torch.tensor([0, 5]), 4)
    assert torch.equal(inputs, torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]]))
    assert torch.equal(targets, inputs + 1)


REPEATS = gpt.GPTTrainConfig(batch_size=16, context_length=128, repeat_fraction=0.375, repeat_lengths=(10, 64))


def occurs_in(passage: torch.Tensor, ids: torch.Tensor) -> bool:
    """Whether `passage` (n,) is a contiguous stretch of `ids` (N,)."""
    stretches = ids.unfold(0, len(passage), 1)  # (N − n + 1, n)
    return bool((stretches == passage).all(1).any())


def test_repeated_rows_are_a_real_passage_written_over_and_over(text):
    vocab = gpt.vocabulary(text)
    train_ids, _ = gpt.split(gpt.encode(text, vocab), REPEATS.validation_fraction)
    generator = torch.Generator().manual_seed(7)
    for _ in range(3):
        inputs, targets = gpt.training_batch(train_ids, REPEATS, generator)
        assert inputs.shape == targets.shape == (16, 128)
        assert torch.equal(inputs[:, 1:], targets[:, :-1])  # targets are the inputs shifted by one
        rows = torch.cat([inputs, targets[:, -1:]], 1)  # (B, T + 1): every character of each row
        for r, row in enumerate(rows):
            periods = [n for n in range(10, 65) if torch.equal(row[n:], row[:-n])]
            if r < 6:  # round(16 · 0.375) rows repeat a passage of 10 to 64 characters of the training split
                assert periods, r
                assert any(occurs_in(row[:n], train_ids) for n in periods), r
            else:  # the rest are windows of the training split
                assert occurs_in(row, train_ids), r


def test_repeated_passages_follow_the_period_they_drew():
    ids = torch.arange(1000)  # every passage is distinct and increasing, so its period shows
    generator = torch.Generator().manual_seed(0)
    inputs, targets = gpt.repeated_passages(ids, 5, 40, generator, 3, 12)
    for x, y in zip(inputs, targets, strict=True):
        n = int(x[1:].sub(x[:-1]).lt(0).nonzero()[0]) + 1  # where the passage starts again
        assert 3 <= n <= 12
        assert torch.equal(x[:n], torch.arange(x[0], x[0] + n))
        assert torch.equal(torch.cat([x, y[-1:]]), x[:n].repeat(41 // n + 1)[:41])
    with pytest.raises(ValueError, match="shortest <= longest"):
        gpt.repeated_passages(ids, 1, 40, generator, 12, 3)
    with pytest.raises(ValueError, match="repeat_fraction must be in"):
        gpt.training_batch(ids, gpt.GPTTrainConfig(repeat_fraction=1.5), generator)


def test_no_repeats_gives_the_plain_random_windows(text):
    ids = gpt.encode(text[:20000], gpt.vocabulary(text))
    plain = gpt.GPTTrainConfig(repeat_fraction=0.0)
    first, second = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for _ in range(3):
        batch = gpt.training_batch(ids, plain, first)
        windows = gpt.random_windows(ids, plain.batch_size, plain.context_length, second)
        assert all(torch.equal(a, b) for a, b in zip(batch, windows, strict=True))
    with_repeats = gpt.training_batch(ids, REPEATS, torch.Generator().manual_seed(3))
    windows = gpt.random_windows(ids, 16, 128, torch.Generator().manual_seed(3))
    assert torch.equal(with_repeats[0][6:], windows[0][6:])  # the same windows below the repeated rows
    assert not torch.equal(with_repeats[0][:6], windows[0][:6])


def test_training_is_deterministic(text):
    """The same seed trains the same weights and curves, bit for bit (scripts/train_gpt.py relies on it)."""
    small = text[:4000]
    first, curves_1 = gpt.train(small, TINY)
    second, curves_2 = gpt.train(small, TINY)
    assert curves_1 == curves_2
    for (name, a), b in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    torch.manual_seed(TINY.seed)
    fresh = gpt.initialise(Decoder(gpt.model_config(len(gpt.vocabulary(small)), TINY.context_length)))
    assert not torch.equal(fresh.blocks[0].mlp[0].weight, first.blocks[0].mlp[0].weight)  # training moved it
    assert curves_1["train"][-1] < curves_1["train"][0]
    assert not torch.are_deterministic_algorithms_enabled()  # train() leaves the caller's setting as it was


def test_initial_loss_is_about_log_v(text):
    """GPT-2's initialisation starts near the uniform guess, log V nats (the default would be far above)."""
    vocab = gpt.vocabulary(text)
    torch.manual_seed(0)
    model = gpt.initialise(Decoder(gpt.model_config(len(vocab))))
    loss = gpt.evaluate(model, gpt.encode(text[:20000], vocab), gpt.GPTTrainConfig())
    assert abs(loss - math.log(len(vocab))) < 0.1


@pytest.mark.parametrize("without_repeats", [False, True])
def test_stored_weights_give_the_stored_final_losses(text, without_repeats):
    """Each stored model (with repeats, and the run without them) gives its own stored curve's end."""
    model, stored = gpt.load_trained(without_repeats=without_repeats)
    run = stored["without_repeats"] if without_repeats else stored
    config = gpt.GPTTrainConfig(**run["train"])
    assert config.repeat_fraction == (0.0 if without_repeats else gpt.GPTTrainConfig().repeat_fraction)
    train_ids, validation_ids = gpt.split(gpt.encode(text, stored["vocabulary"]), config.validation_fraction)
    assert gpt.evaluate(model, train_ids, config) == pytest.approx(run["curves"]["train"][-1], abs=1e-4)
    assert gpt.evaluate(model, validation_ids, config) == pytest.approx(run["curves"]["validation"][-1], abs=1e-4)
    assert stored["vocabulary"] == gpt.vocabulary(text)


@pytest.mark.parametrize("name", [gpt.WEIGHTS_FILE, gpt.PLAIN_WEIGHTS_FILE])
def test_stored_weights_are_small_and_load_without_pickle(name):
    path = gpt.DATA.joinpath(name)
    assert path.stat().st_size < 3 * 2**20
    with path.open("rb") as file:
        torch.load(file, weights_only=True)


def brute_force_filter(row, top_k, top_p):
    """The kept set of one row (V,), by the definitions, one token at a time."""
    V = len(row)
    ranked = sorted(range(V), key=lambda i: -row[i].item())
    keep = set(range(V))
    if top_k is not None:
        kth = row[ranked[min(top_k, V) - 1]].item()
        keep = {i for i in keep if row[i].item() >= kth}
    if top_p is not None:
        p = torch.softmax(torch.tensor([row[i].item() if i in keep else -math.inf for i in range(V)]), 0)
        mass, kept = 0.0, set()
        for i in ranked:
            if i in keep and mass < top_p:
                kept.add(i)
                mass += p[i].item()
        keep = kept
    return keep


@pytest.mark.parametrize("seed", range(5))
def test_top_k_top_p_keeps_what_the_definitions_keep(seed):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(3, 11, generator=gen) * 2
    for top_k, top_p in [(None, None), (3, None), (None, 0.5), (4, 0.7), (1, None), (None, 1.0), (11, 0.05)]:
        filtered = gpt.top_k_top_p(logits, top_k, top_p)
        for row, out in zip(logits, filtered, strict=True):
            assert set(torch.isfinite(out).nonzero().flatten().tolist()) == brute_force_filter(row, top_k, top_p)
            assert torch.equal(out[torch.isfinite(out)], row[torch.isfinite(out)])


def test_top_k_top_p_refuses_bad_arguments():
    with pytest.raises(ValueError, match="top_k must be a positive integer"):
        gpt.top_k_top_p(torch.zeros(1, 3), top_k=0)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        gpt.top_k_top_p(torch.zeros(1, 3), top_p=1.5)


def test_sampling_with_the_cache_gives_the_same_tokens(trained):
    model, stored = trained
    prompt = gpt.encode("The ", stored["vocabulary"])[None]
    runs = [gpt.sample(model, prompt, 40, 1.0, top_k=10, generator=torch.Generator().manual_seed(3),
                       use_cache=use_cache) for use_cache in (True, False)]
    assert torch.equal(*runs)
    with pytest.raises(ValueError, match="exceed context_length"):
        gpt.sample(model, prompt, model.config.context_length)


def test_sampling_tempers_before_it_filters_as_hugging_face_does(trained):
    """Temperature first, then top-k, then top-p: at τ = 0.5 the nucleus of p = 0.8 is that of the tempered
    distribution (filtering the raw logits first keeps more tokens), drawn by the same generator."""
    model, stored = trained
    prompt = gpt.encode("The ", stored["vocabulary"])[None]
    temperature, top_k, top_p = 0.5, 20, 0.8
    sampled = gpt.sample(model, prompt, 30, temperature, top_k, top_p, generator=torch.Generator().manual_seed(5))
    generator, tokens = torch.Generator().manual_seed(5), prompt
    with torch.no_grad():
        for _ in range(30):
            logits = model(tokens)[:, -1] / temperature  # (1, V)
            kth = logits.topk(top_k).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
            ranked, order = logits.sort(descending=True)
            p = ranked.softmax(-1)
            keep = (p.cumsum(-1) - p) < top_p  # the mass ranked above is still below p
            logits = torch.full_like(logits, float("-inf")).scatter(-1, order[keep][None], ranked[keep][None])
            tokens = torch.cat([tokens, torch.multinomial(logits.softmax(-1), 1, generator=generator)], -1)
    assert torch.equal(sampled, tokens)
    raw = torch.tensor([[2.0, 1.0, 0.0, -1.0]])  # the order matters for top-p
    assert torch.isfinite(gpt.top_k_top_p(raw, top_p=0.8)).sum() == 2  # filtered untempered
    assert torch.isfinite(gpt.top_k_top_p(raw / 0.5, top_p=0.8)).sum() == 1  # tempered first


def test_ablated_head_writes_exactly_nothing_and_the_hook_goes_away():
    gen = torch.Generator().manual_seed(0)
    mha = random_attention(gen, 8, 4)
    x = torch.randn(2, 5, 8, generator=gen)

    class Holder(torch.nn.Module):  # the path `ablated` reaches a block's attention by
        def __init__(self):
            super().__init__()
            self.config = type("C", (), {"embed_dim": 8, "num_heads": 4, "num_layers": 1})
            self.blocks = torch.nn.ModuleList([torch.nn.Module()])
            self.blocks[0].attention = torch.nn.Module()
            self.blocks[0].attention.attention = mha

    holder = Holder()
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    with torch.no_grad(), gpt.ablated(holder, [(0, 2)]):
        out, _ = mha(x, mask=mask)
    assert torch.allclose(out, attention_without(mha, x, [2]), atol=1e-6)
    with torch.no_grad():
        assert torch.allclose(mha(x, mask=mask)[0], attention_without(mha, x, []), atol=1e-6)
    with pytest.raises(ValueError, match=r"head \(0, 4\) does not exist"):
        with gpt.ablated(holder, [(0, 4)]):
            pass


def test_attention_maps_average_to_what_the_model_returns(trained):
    model, stored = trained
    tokens = gpt.encode("The import statement. The import statement.", stored["vocabulary"])[None]
    maps = gpt.attention_maps(model, tokens)  # (L, H, T, T)
    assert maps.shape == (2, 4, tokens.shape[1], tokens.shape[1])
    assert torch.allclose(maps.sum(-1), torch.ones(2, 4, tokens.shape[1]), atol=1e-5)
    x = model.token_embedding(tokens) + model.position_embedding(torch.arange(tokens.shape[1]))
    with torch.no_grad():
        _, averaged = model.blocks[0].attention(model.blocks[0].norm1(x), need_weights=True)
    assert torch.allclose(maps[0].mean(0), averaged[0], atol=1e-6)
    assert isinstance(model.blocks[0].attention.attention, MultiHeadAttention)


def test_head_scores_on_hand_made_patterns():
    T, period = 8, 4
    previous = torch.zeros(1, 1, T, T)
    previous[0, 0, 0, 0] = 1
    previous[0, 0, torch.arange(1, T), torch.arange(T - 1)] = 1
    assert gpt.previous_token_scores(previous).item() == 1
    induction = torch.zeros(1, 1, T, T)
    induction[0, 0, torch.arange(period, T), torch.arange(period, T) - period + 1] = 1
    assert gpt.induction_scores(induction, period).item() == 1
    assert gpt.previous_token_scores(induction).item() == 0
    with pytest.raises(ValueError, match="period must be from 1"):
        gpt.induction_scores(induction, T)


def test_kneser_ney_matches_a_hand_count_and_sums_to_one():
    text = "abracadabra"  # vocabulary a b c d r; 7 different pairs
    vocab = gpt.vocabulary(text)
    one, two = gpt.kneser_ney(text, vocab, 1), gpt.kneser_ney(text, vocab, 2)
    # p(b) = (N(·b) + 1) / (7 + 5) = 2/12; "a" is followed 4 times by 3 kinds: b b c d
    assert one("a", "b") == pytest.approx((2 - 0.75 + 0.75 * 3 * 2 / 12) / 4)
    # N(·a·) = 3 (dab, rac, cad): p(c | a) = (0.25 + 0.75·3·2/12)/3; "ra" is followed once, by c
    assert two("ra", "c") == pytest.approx(0.25 + 0.75 * (0.25 + 0.75 * 3 * 2 / 12) / 3)
    assert two("", "r") == pytest.approx(2 / 12)  # no context: the continuation unigram
    for model in (one, two):
        for context in ("", "a", "ra", "dd", "rr", "b"):  # seen, unseen, cut short
            assert sum(model(context, c) for c in vocab) == pytest.approx(1, abs=1e-12)


def test_kneser_ney_sums_to_one_on_the_corpus_and_refuses_bad_arguments(text):
    vocab = gpt.vocabulary(text)
    model = gpt.kneser_ney(text[:20_000], vocab, 4)  # characters outside this stretch are never seen
    for context in ("the ", "e ", "qqqq", "Zyx"):
        assert sum(model(context, c) for c in vocab) == pytest.approx(1, abs=1e-12)
    with pytest.raises(ValueError, match="k must be"):
        gpt.kneser_ney(text, vocab, 0)
    with pytest.raises(ValueError, match="not in the vocabulary"):
        model("the", "\x00")


def test_a_schedule_off_at_one_step_is_told_which_part_and_not_mistaken_for_rounding():
    """Exercise 12.6's last resort feedback: a rate off by more than rounding names the step, the relative
    difference and the part of the schedule (a learner read 0.00389912 against 0.0038991 as rounding)."""
    from attention_book.course.checks.ch12 import check_lr_schedule, schedule_variants

    def off_at_the_end(peak, warmup, steps):
        rates = schedule_variants(peak, warmup, steps)["right"]
        rates[-1] *= 1 + 3e-5  # the last step of the cosine, slightly off
        return rates

    message = check_lr_schedule(off_at_the_end)
    assert message is not None and "more than rounding" in message and "cosine" in message, message
    assert "relative difference of 3.0e-05" in message, message
