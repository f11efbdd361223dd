"""The paper lab's functions against the formulas they illustrate (issue 14)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from aiayn.config import ModelConfig
from aiayn.lab import cost, details, forcing, heads, lengths, paths, positions, recurrence, softmax, variations
from aiayn.model import Transformer


def test_scaling_scores_grow_like_sqrt_d_k():
    np.testing.assert_allclose(softmax.scaling_scores(2.0, 64), [16.0, 8.0, 0.0])
    np.testing.assert_allclose(softmax.scaling_scores(1.0, 1, matches=(0.3,)), [0.3])


def test_attention_weights_scaled_and_not():
    scores = softmax.scaling_scores(2.0, 64)  # [16, 8, 0]
    unscaled = np.exp(scores) / np.exp(scores).sum()
    scaled = np.exp(scores / 8) / np.exp(scores / 8).sum()
    np.testing.assert_allclose(softmax.attention_weights(scores, 64, scaled=False), unscaled)
    np.testing.assert_allclose(softmax.attention_weights(scores, 64), scaled)
    # The scaled scores (2, 1, 0) do not depend on d_k: the widget's point.
    np.testing.assert_allclose(softmax.attention_weights(softmax.scaling_scores(2.0, 1024), 1024), scaled)


def test_jacobian_norm_formula():
    p = np.array([0.5, 0.25, 0.25])
    jacobian = np.array([[0.25, -0.125, -0.125], [-0.125, 0.1875, -0.0625], [-0.125, -0.0625, 0.1875]])
    assert softmax.jacobian_norm(p) == pytest.approx(np.linalg.norm(jacobian))
    assert softmax.jacobian_norm(np.array([1.0, 0.0, 0.0])) == 0.0  # saturated: no gradient


def test_dot_product_variance_is_d_k():
    d_ks = [1, 16, 256, 1024]
    variance = softmax.dot_product_variance(d_ks, samples=8000)
    np.testing.assert_allclose(variance, d_ks, rtol=0.1)


def test_unscaled_softmax_saturates_and_scaled_does_not():
    stats = softmax.saturation([1, 1024], samples=200)
    assert stats["max_weight_unscaled"][1] > 0.9 and stats["gradient_unscaled"][1] < 0.1
    assert abs(stats["max_weight_scaled"][1] - stats["max_weight_scaled"][0]) < 0.1


def test_encoding_matches_the_formula_in_both_layouts():
    pe = positions.encoding(50, 16)
    pos, i = 37, 3
    angle = pos / 10000 ** (2 * i / 16)
    assert pe[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-6)
    assert pe[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-6)
    halves = positions.encoding(50, 16, layout="halves")
    np.testing.assert_allclose(halves[:, :8], pe[:, 0::2])
    np.testing.assert_allclose(halves[:, 8:], pe[:, 1::2])
    with pytest.raises(ValueError, match="even"):
        positions.encoding(5, 7)


def test_wavelengths_geometric_from_2pi():
    w = positions.wavelengths(512)
    assert w.shape == (256,)
    assert w[0] == pytest.approx(2 * math.pi)
    assert w[-1] == pytest.approx(2 * math.pi * 10000 ** (510 / 512))
    assert round(w[-1]) == 60611
    np.testing.assert_allclose(w[1:] / w[:-1], 10000 ** (2 / 512))


def test_shift_is_one_linear_map_for_every_position():
    for k in (1, 5, 30):
        assert positions.linearity_error(k, 64, length=200) < 1e-5


def test_table2_costs_are_time_gpus_rate():
    rows = {row.model: row for row in cost.TABLE2}
    base, big = rows["Transformer (base model)"], rows["Transformer (big)"]
    assert f"{cost.paper_flops(cost.BASE_HOURS):.1e}" == f"{base.flops_en_de:.1e}" == "3.3e+18"
    assert f"{cost.paper_flops(cost.BIG_HOURS):.1e}" == f"{big.flops_en_de:.1e}" == "2.3e+19"
    assert (big.bleu_en_de, big.bleu_en_fr) == (28.4, 41.8)
    assert all(isinstance(row, cost.Table2Row) for row in cost.TABLE2)


# --- items 2-4: recurrence, recurrent against attention layers, Table 1 --------------------------------


def test_recurrence_trace_matches_the_explanation():
    trace = recurrence.scalar_trace()
    assert [f"{h:.4f}" for h in trace] == ["0.7616", "0.3634", "0.1797", "0.0896", "0.0448", "0.0224"]
    assert trace[0] == pytest.approx(math.tanh(1.0))
    assert trace[1] == pytest.approx(math.tanh(0.5 * math.tanh(1.0)))


def test_loops_equal_the_library_and_row_7_alone_equals_the_product():
    a = recurrence.agreement(batch=4, n=12, d=64)
    assert a.rnn_vs_library < 1e-5 and a.gru_vs_library < 1e-5 and a.attention_vs_sdpa < 1e-5
    assert a.row7_alone < 1e-6  # the same arithmetic; matrix-product blocking may round differently


def test_changing_word_3_moves_only_later_recurrent_states():
    move = recurrence.change_one_word(word=3, batch=4, n=8, d=64)
    assert (move["rnn"][:3] == 0).all() and (move["rnn"][3:] > 0).all()
    assert (move["attention"] > 0).all()


@pytest.mark.parametrize(
    "kind, k, expected",
    [
        ("recurrent", 3, [2, 10, 50, 200]),
        ("convolutional", 3, [1, 5, 25, 100]),  # ceil(d / (k - 1))
        ("dilated", 2, [2, 4, 6, 8]),  # ceil(log2(d + 1))
        ("self-attention", 3, [1, 1, 1, 1]),
    ],
)
def test_measured_path_lengths_equal_the_exact_counts(kind, k, expected):
    assert [paths.path_length(kind, d, k=k) for d in (2, 10, 50, 200)] == expected
    assert [paths.exact_path_length(kind, d, k=k) for d in (2, 10, 50, 200)] == expected


def test_restricted_and_wider_kernels_follow_their_formulas():
    for d in (3, 17, 40):
        assert paths.path_length("restricted", d, r=4) == math.ceil(d / 4)
        assert paths.path_length("convolutional", d, k=5) == math.ceil(d / 4)
        assert paths.path_length("dilated", d, k=3) == math.ceil(math.log(d + 1, 3) - 1e-12)


def test_sequential_operations_and_layer_flops():
    assert paths.sequential_operations("recurrent", 37) == 37
    assert all(paths.sequential_operations(k, 37) == 1 for k in paths.KINDS if k != "recurrent")
    n = np.array([8, 32, 64])
    flops = paths.layer_flops(n, 32)
    np.testing.assert_array_equal(flops["self-attention"], 4 * n**2 * 32)
    np.testing.assert_array_equal(flops["recurrent"], 4 * n * 32**2)
    with pytest.raises(ValueError, match="unknown layer kind"):
        paths.path_length("lstm", 3)


# --- items 8 and 12 on a tiny model ----------------------------------------------------------------------


@pytest.fixture
def tiny_model():
    torch.manual_seed(0)
    return Transformer(ModelConfig.preset("tiny", vocab_size=40, max_len=64)).eval()


def test_teacher_forcing_equals_generation(tiny_model):
    src = torch.tensor([[5, 9, 11, 7, 2]])
    result = forcing.teacher_forcing(tiny_model, src, max_new=12)
    assert result["max_difference"] < 1e-5 and result["same_tokens"]
    assert result["logits_shape"] == (result["calls"], 40)
    loss = forcing.loss_by_hand(tiny_model, src, result["tokens"])
    assert loss["loss_by_hand"] == pytest.approx(loss["loss_library"], abs=1e-5)
    assert loss["loss_by_hand"] == pytest.approx(-np.log(loss["p_right"]).mean(), rel=1e-5)
    assert loss["smoothed_by_hand"] == pytest.approx(loss["smoothed_library"], abs=1e-5)
    assert loss["loss_aiayn"] == pytest.approx(loss["loss_by_hand"], abs=1e-5)
    assert loss["smoothed_by_hand"] > loss["loss_by_hand"] + 0.05  # smoothing's mass on the other classes shows
    wrong = forcing.loss_by_hand(tiny_model, src, result["tokens"], epsilon=0.3)
    assert wrong["smoothed_library"] != pytest.approx(loss["smoothed_library"], abs=1e-3)  # epsilon reaches PyTorch


def test_whole_layer_flops_are_torchs_count_and_cross_where_the_algebra_says():
    """The attention sub-layer with its projections (aiayn's MultiHeadAttention) and the FFN, counted by torch's FLOP
    counter, equal the formula; it is cheaper than a GRU layer exactly for n < d and than an LSTM layer for n < 2d."""
    from torch.utils.flop_counter import FlopCounterMode

    config = ModelConfig.preset("tiny", vocab_size=40, max_len=64)
    layer, d = Transformer(config).encoder.layers[0], config.d_model
    for n in (5, 64):
        x = torch.randn(1, n, d)
        with FlopCounterMode(display=False) as attention:  # with its weights: eq. 1 as products the counter sees
            layer.self_attn(x, layer.self_attn.project_kv(x), None, True)
        with FlopCounterMode(display=False) as ffn:
            layer.ffn(x)
        counted = paths.whole_layer_flops(n, d, config.d_ff)
        assert (attention.get_total_flops(), ffn.get_total_flops()) == (counted["attention"], counted["ffn"])
    lengths = list(range(1, 3 * 512))
    assert paths.cheaper_below("gru", 512, 2048, lengths) == list(range(1, 512))
    assert paths.cheaper_below("lstm", 512, 2048, lengths) == list(range(1, 1024))
    assert paths.cheaper_below("rnn", 512, 2048, lengths) == []
    assert paths.share_shorter([3, 511, 512, 900], 512) == 0.5


def test_without_causal_mask_reads_the_future_and_is_restored(tiny_model):
    assert not forcing.reads_the_future(tiny_model)
    with forcing.without_causal_mask():
        assert forcing.reads_the_future(tiny_model)
    assert not forcing.reads_the_future(tiny_model)


def test_mask_experiment_runs_both_ways():
    config = ModelConfig(vocab_size=30, d_model=16, d_ff=32, n_heads=2, n_layers=1, p_drop=0.0, max_len=32)
    pairs = [([5 + i % 7, 6 + i % 5, 2], [9 + i % 6, 8 + i % 4, 2]) for i in range(20)]
    r = forcing.mask_experiment(config, pairs[:16], pairs[16:], steps=4)
    assert r["unmasked_reads_future"] and not r["masked_reads_future"]
    assert r["masked_loss"].shape == (4,) and 0 <= r["unmasked_accuracy"] <= 1


def test_small_claims_on_a_tiny_model(tiny_model):
    shared = details.shared_matrix(tiny_model)
    assert shared["embeddings_shared"] and shared["projection_error"] == 0 and shared["scale_error"] < 1e-6
    scale = tiny_model.decoder.embed.scale
    try:
        tiny_model.decoder.embed.scale = 1.0  # the §3.4 scaling left out: the check sees it
        assert details.shared_matrix(tiny_model)["scale_error"] > 1e-3
    finally:
        tiny_model.decoder.embed.scale = scale
    src, tgt_in = torch.tensor([[5, 9, 11, 7, 2]]), torch.tensor([[1, 8, 12, 6]])
    assert details.masked_weights(tiny_model, src, tgt_in) == 0.0
    assert details.ffn_as_convolutions(tiny_model) < 1e-5
    ffn = tiny_model.encoder.layers[0].ffn
    saved = [p.detach().clone() for p in ffn.parameters()]
    try:  # a trained FFN's outputs run into the hundreds: float32's rounding is relative, so is the criterion
        with torch.no_grad():
            for p in ffn.parameters():
                p.mul_(30)
        assert details.ffn_as_convolutions(tiny_model) < 1e-5
        ffn_forward = ffn.forward  # the convolutions read the same weights: shift the FFN's output alone
        ffn.forward = lambda x: ffn_forward(x) + 1e-2 * ffn_forward(x).abs().max()
        assert details.ffn_as_convolutions(tiny_model) > 1e-3  # a real difference shows
    finally:
        del ffn.forward
        with torch.no_grad():
            for p, s in zip(ffn.parameters(), saved):
                p.copy_(s)
    eq = details.permutation_equivariance(tiny_model, src)
    assert eq["without_positions"] < 1e-5 < 1e-3 < eq["with_positions"]
    torch.testing.assert_close(
        tiny_model.encoder.positions.table[:3, :4].double(), torch.from_numpy(positions.encoding(3, 64)[:, :4])
    )  # the table is restored


def test_learning_rate_peak_is_eq3():
    lr = details.learning_rate_curve()
    assert lr["peak_step"] == 4000 and lr["peak_rate"] == pytest.approx(512**-0.5 * 4000**-0.5)


def test_additive_scores_formula():
    q, k = torch.randn(1, 2, 3), torch.randn(1, 4, 3)
    w_q, w_k, v = torch.randn(3, 3), torch.randn(3, 3), torch.randn(3)
    scores = details.additive_scores(q, k, w_q, w_k, v)
    assert scores.shape == (1, 2, 4)
    assert float(scores[0, 1, 2]) == pytest.approx(float(torch.tanh(q[0, 1] @ w_q + k[0, 2] @ w_k) @ v), rel=1e-5)


# --- items 6, 9, 10 --------------------------------------------------------------------------------------


class PieceTokenizer:
    """Whitespace words as pieces, ids from a fixed list (enough for the attention functions)."""

    words = ["<pad>", "<s>", "</s>", "<unk>", "the", "animal", "it", "was", "tired", ".", "er", "war"]

    def encode_source(self, texts):
        return [[self.words.index(w) if w in self.words else 3 for w in t.lower().split()] + [2] for t in texts]

    def pieces(self, ids):
        return [self.words[i] for i in ids]

    def decode(self, ids):
        return " ".join(self.words[i] for i in ids if i > 2)

    def __len__(self):
        return len(self.words)


def test_where_it_looks_reads_one_row_per_head():
    torch.manual_seed(0)
    model = Transformer(ModelConfig.preset("tiny", vocab_size=12, max_len=32)).eval()
    r = heads.where_it_looks(model, PieceTokenizer(), "the animal was tired because it was tired .", [10, 11, 2])
    assert r["layer"] == 0 and r["word_index"] == 5  # tiny has 2 layers: the one before the last
    assert r["word_rows"].shape == (4, 10)
    np.testing.assert_allclose(r["word_rows"].sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(r["word_rows"], r["heads"][:, 5])
    assert r["pronoun_index"] == 0 and r["pronoun_cross"].shape == (2, 10)
    with pytest.raises(ValueError, match="not an encoder layer"):
        heads.where_it_looks(model, PieceTokenizer(), "it", [2], layer=5)


def test_counted_flops_are_6nd_plus_attention():
    base = ModelConfig.preset("base")
    counted = cost.counted_flops(base, 100_000)
    with torch.device("meta"):
        params = Transformer(base).num_parameters()
    rule = cost.six_n_d(params, 25_000 * 100_000)  # each token of a side meets about half the weights
    assert rule < counted < 1.1 * rule


def test_table3_counts_follow_the_layer_formula():
    rows = {r["label"]: r for r in variations.table3_counts()}
    D, F, V = 512, 2048, 37_000
    attention, ffn, norm = 4 * (D * D + D), 2 * D * F + F + D, 2 * D
    encoder, decoder = attention + ffn + 2 * norm, 2 * attention + ffn + 3 * norm
    assert rows["base"]["counted_m"] * 1e6 == V * D + 6 * (encoder + decoder)
    assert rows["N=2"]["counted_m"] * 1e6 == V * D + 2 * (encoder + decoder)
    assert rows["h=16"]["counted_m"] == rows["base"]["counted_m"]  # heads split d_model, not add to it
    # row B: W^Q and W^K of all 18 attention blocks shrink from D x D to D x (h d_k), d_v stays 64
    saved = 18 * 2 * ((D * D + D) - (D * 8 * 16 + 8 * 16))
    assert round((rows["base"]["counted_m"] - rows["d_k=16"]["counted_m"]) * 1e6) == saved
    assert rows["big"]["paper_m"] == 213 and abs(rows["big"]["counted_m"] - 213) < 3


def test_the_averaging_claim_counts_the_checkpoints_training_averaged(tmp_path):
    run = tmp_path / "run"
    for step in (30, 60, 90, 95):
        (run / "checkpoints" / f"step-{step}").mkdir(parents=True)
    (run / "results.json").write_text('{"averaged": ["step-30", "step-60", "step-90"]}')
    assert details.averaged_checkpoints(run) == ["step-30", "step-60", "step-90"]  # step-95 left out, as training did
    (run / "results.json").write_text('{"test_bleu": 1.0}')
    assert details.averaged_checkpoints(run) is None  # not recorded: the caller counts the folders
    (run / "results.json").write_text("[" * 100_000 + "]" * 100_000)
    assert details.averaged_checkpoints(run) is None


def test_the_paired_bootstrap_is_sacrebleus_and_tells_noise_from_a_difference():
    refs = [f"a man number {i} rides a red bike down the street" for i in range(60)]
    near = [r.replace("red", "blue") if i == 7 else r for i, r in enumerate(refs)]  # one word in 60 sentences
    noise = details.paired_bootstrap(refs, near, refs, samples=200)
    assert noise["p_value"] > 0.05 and noise["ci95"] > 0
    worse = [r.replace("red bike", "car") for r in refs]
    differs = details.paired_bootstrap(refs, worse, refs, samples=200)
    assert differs["p_value"] < 0.05 and differs["ci95"] >= 0


def test_the_gradient_fades_through_recurrence_and_not_through_attention():
    g = recurrence.gradient_by_distance(n=24, d=16)
    assert {name: v.shape for name, v in g.items()} == {name: (24,) for name in ("rnn", "gru", "attention")}
    for name in ("rnn", "gru"):
        assert g[name][20] < 1e-3 * g[name][1] and (np.diff(g[name][1:]) < 0).mean() > 0.8, name
    attention = g["attention"][1:]
    assert attention.max() < 10 * attention.min()


def test_the_decoder_reads_the_target_shifted_right(tiny_model):
    target = [7, 12, 9, 30, 2]
    shift = forcing.shift_right(tiny_model, [5, 9, 11, 2], target)
    assert shift["decoder_input"] == [tiny_model.config.bos_id, 7, 12, 9, 30] and shift["changed"] == 1
    assert shift["earlier"] < 1e-6 < shift["later"]
    assert (shift["moved"][:2] < 1e-6).all() and (shift["moved"][2:] > 0).all()
    assert forcing.shift_right(tiny_model, [5, 2], [7, 2])["changed"] == 0
    with pytest.raises(ValueError, match="shifting needs 2"):
        forcing.shift_right(tiny_model, [5, 2], [2])


def test_the_earlier_models_against_the_transformers_are_table_2s_ratios():
    rows = {(r["model"], r["pair"]): r for r in cost.against_earlier_models()}
    assert len(rows) == 12 and ("ByteNet", "EN-DE") not in rows  # ByteNet has no cost in Table 2
    gnmt = rows["GNMT + RL", "EN-DE"]
    assert gnmt["flops_over_base"] == pytest.approx(2.3e19 / 3.3e18) and gnmt["flops_over_big"] == pytest.approx(1.0)
    assert gnmt["base_bleu_gain"] == pytest.approx(27.3 - 24.6) and gnmt["big_bleu_gain"] == pytest.approx(28.4 - 24.6)
    assert rows["ConvS2S", "EN-DE"]["flops_over_big"] < 1  # the big model cost more than ConvS2S


def test_attention_between_words_sums_a_words_pieces():
    pieces = ["\u2581The", "\u2581La", "w", "\u2581will", ".", "</s>"]
    words = heads.words_of(pieces)
    assert words == [[0], [1, 2], [3, 4], [5]]
    rng = np.random.default_rng(0)
    weights = rng.random((2, 6, 6))
    weights /= weights.sum(-1, keepdims=True)  # (h, S, S), rows of a softmax
    merged = heads.merge_to_words(weights, words)
    assert merged.shape == (2, 4, 4) and np.allclose(merged.sum(-1), 1)
    assert merged[1, 1, 2] == pytest.approx((weights[1, 1, 3:5].sum() + weights[1, 2, 3:5].sum()) / 2)
    assert merged[0, 0, 1] == pytest.approx(weights[0, 0, 1] + weights[0, 0, 2])


def test_a_training_steps_memory_is_linear_in_the_batch_and_counts_the_logits():
    config = ModelConfig.preset("tiny", vocab_size=300, max_len=64)
    model = Transformer(config)
    one, two, three = (lengths.saved_bytes(model, b, 10) for b in (1, 2, 3))
    assert two - one == three - two > 0  # every saved activation scales with the batch at a fixed length
    assert one >= 10 * 300 * 4  # at least the float32 logits of 10 target positions
    memory = lengths.training_memory(config, [1, 2, 3], length=10)
    assert memory["bytes_per_token"] == pytest.approx((two - one) / 10) and memory["fit_error"] < 1e-9
    assert memory["fixed_bytes"] == 16 * sum(p.numel() for p in model.parameters())
    room = memory["ram_bytes"] - memory["fixed_bytes"] - memory["intercept"]
    assert memory["max_tokens"] == pytest.approx(room / memory["bytes_per_token"])


def test_the_appendix_sentences_are_merged_into_words_for_a_marian_model_too(tmp_path):
    from aiayn.model_folder import load_any
    from test_marian import build_marian

    model, tokenizer, _ = load_any(build_marian(tmp_path / "opus-mt-en-de"))
    maps = heads.appendix_attention(model.eval(), tokenizer)
    assert len(maps) == 2
    for a in maps:
        assert len(a["words"]) > 10 and a["words"][-1] == "</s>"
        assert a["mean"].shape == (len(a["words"]),) * 2 and np.allclose(a["mean"].sum(-1), 1, atol=1e-5)
