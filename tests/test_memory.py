"""The memory calculator: the 8B figures of Alex Xie's lecture, the mixed-precision count by hand,
the KV cache of a known shape, ZeRO's stages from the paper's formulas for every preset, and (with
CUDA) the count against measured memory of a >100M-parameter model."""
import pytest
import torch

from minirl.lm import memory
from minirl.lm.model import GPT, GPTConfig


def test_lecture_preset_reproduces_the_lecture_figures():
    """Alex Xie, "RL for LLMs: From Parrots to Agents" (CMU, 2025): 8B in fp16 is 16 GB;
    PPO = 3*16 policy + 16 ref + 3*16 critic + 16 RM = 128 GB, GRPO = 3*16 + 16 + 16 = 80 GB."""
    assert memory.training_memory("ppo", 8e9, "lecture")["total"] == pytest.approx(128.0)
    assert memory.training_memory("grpo", 8e9, "lecture")["total"] == pytest.approx(80.0)


def test_mixed_precision_adam_by_hand():
    """bf16 weights 2 + bf16 grads 2 + fp32 master 4 + fp32 Adam moments 8 = 16 bytes per trained
    parameter: the 8B policy alone is 128 GB; frozen copies are 16 GB each."""
    ppo = memory.training_memory("ppo", 8e9, "mixed_adam")
    assert ppo == pytest.approx({"policy": 128.0, "reference": 16.0, "critic": 128.0, "reward": 16.0, "total": 288.0})
    grpo = memory.training_memory("grpo", 8e9, "mixed_adam", reward_model=False)
    assert grpo["total"] == pytest.approx(144.0) and "reward" not in grpo
    assert memory.training_memory("dpo", 1e9)["total"] == pytest.approx(18.0)


def test_kv_cache_of_llama3_8b():
    """32 layers x 8 KV heads x 128 dims x (K and V) x 2 bytes = 131,072 bytes per token."""
    assert memory.kv_cache_bytes(memory.SHAPES[8], batch=1, seq_len=1) == 2 * 32 * 8 * 128 * 2
    mem = memory.training_memory("grpo", 8e9, batch=64, seq_len=1024, shape=memory.SHAPES[8])
    assert mem["kv_cache"] == pytest.approx(64 * 1024 * 131072 / 1e9)
    assert mem["activations"] == pytest.approx(32 * 64 * 1024 * 4096 * 2 / 1e9)  # checkpointed: one input per layer
    assert "kv_cache" not in memory.training_memory("dpo", 8e9, batch=8, seq_len=512, shape=memory.SHAPES[8])


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown algorithm"):
        memory.training_memory("a2c", 1e9)
    with pytest.raises(ValueError, match="unknown preset"):
        memory.training_memory("ppo", 1e9, preset="fp8")
    with pytest.raises(ValueError, match="shape"):
        memory.training_memory("ppo", 1e9, batch=8, seq_len=128)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU to measure memory")
def test_trained_model_memory_matches_measured_on_gpu():
    """fp32 weights, gradients and AdamW's two moments are 16 bytes per parameter, as the
    mixed_adam count: measured after a step on a >100M-parameter GPT (gradients kept)."""
    model = GPT(GPTConfig(vocab_size=32000, n_ctx=128, n_embd=1024, n_layer=8, n_head=16)).cuda()
    n = sum(p.numel() for p in model.parameters())
    assert n > 100e6
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, 32000, (2, 128), device="cuda")
    model.logits(model.hidden_states(x)).float().logsumexp(-1).mean().backward()
    opt.step()
    torch.cuda.synchronize()
    measured = torch.cuda.memory_allocated() / 1e9
    assert measured == pytest.approx(memory.training_memory("dpo", n)["policy"], rel=0.1)


def test_zero_model_states_match_the_papers_figure_1():
    """Rajbhandari et al. (2020), Figure 1: a 7.5B model on 64 data-parallel GPUs, mixed-precision Adam
    (K = 12): 120 GB per GPU without ZeRO, 31.4 (stage 1), 16.6 (stage 2), 1.9 (stage 3)."""
    published = {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}
    for stage, gb in published.items():
        assert memory.zero_model_states(7.5e9, ranks=64, stage=stage) == pytest.approx(gb, abs=0.05)
    assert memory.zero_model_states(1.5e9, ranks=1, stage=3) == pytest.approx(24.0)  # GPT-2 1.5B: "at least 24 GB"
    for stage in range(4):  # one rank: nothing to shard
        assert memory.zero_model_states(7e9, ranks=1, stage=stage) == pytest.approx(7e9 * 16 / 1e9)
    with pytest.raises(ValueError, match="stage"):
        memory.zero_model_states(7e9, ranks=8, stage=4)


@pytest.mark.parametrize("ranks", [1, 4, 64])
def test_zero_stages_shard_the_right_states_of_every_preset(monkeypatch, ranks):
    """ZeRO (Rajbhandari et al., 2020), per parameter with 16-bit weights W, gradients G and optimizer
    state K (fp32 master + moments): stage 0 W + G + K, stage 1 W + G + K/N, stage 2 W + (G + K)/N,
    stage 3 (W + G + K)/N. The default preset has W = G = 2 bytes, so a stage 2 that shards the
    weights instead of the gradients gives the same number there: the lecture preset (W 2, G 0,
    K 4) and a preset of four different byte counts (W 1, G 3, master 5, moments 7) tell them apart."""
    monkeypatch.setitem(memory.PRESETS, "distinct", memory.Precision(weights=1, grads=3, master=5, optimizer=7))
    n, N = 3e9, ranks
    for preset, (W, G, K) in {"lecture": (2, 0, 4), "mixed_adam": (2, 2, 12), "distinct": (1, 3, 12)}.items():
        want = {0: W + G + K, 1: W + G + K / N, 2: W + (G + K) / N, 3: (W + G + K) / N}
        for stage, bytes_per_param in want.items():
            got = memory.zero_model_states(n, ranks=N, stage=stage, preset=preset)
            assert got == pytest.approx(n * bytes_per_param / 1e9, rel=1e-12), (preset, stage)


def test_zero_lecture_preset_by_hand():
    """8B parameters on 8 ranks, 2-byte weights and 4 bytes of Adam moments, no gradients or master
    copy counted: 48 GB unsharded; stages 1 and 2 shard only the 32 GB of moments (16 + 4 = 20 GB);
    stage 3 shards everything (6 GB)."""
    got = [memory.zero_model_states(8e9, ranks=8, stage=s, preset="lecture") for s in range(4)]
    assert got == pytest.approx([48.0, 20.0, 20.0, 6.0], rel=1e-12)


def test_activation_bytes_by_hand_at_both_precisions():
    """Llama 3 8B's shape (32 layers, width 4096, 32 heads), 2 sequences of 1,024 tokens. With checkpointing
    each layer keeps its input, 2048 x 4096 values; without, Korthikanti et al.'s 34 bytes per token and width
    and 5 x heads x length per token at 2 bytes a value, scaled for 4-byte values (it once ignored the size)."""
    shape, tokens = memory.SHAPES[8], 2 * 1024
    assert memory.activation_bytes(shape, 2, 1024, checkpointing=True, bytes_per_value=2) == 32 * tokens * 4096 * 2
    assert memory.activation_bytes(shape, 2, 1024, checkpointing=True, bytes_per_value=4) == 32 * tokens * 4096 * 4
    korthikanti = 32 * (tokens * 4096 * 34 + tokens * 5 * 32 * 1024)  # bytes at 16 bits
    assert memory.activation_bytes(shape, 2, 1024, checkpointing=False, bytes_per_value=2) == korthikanti
    assert memory.activation_bytes(shape, 2, 1024, checkpointing=False, bytes_per_value=4) == 2 * korthikanti
