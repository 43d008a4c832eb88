"""Cross-checks against TRL's own code (pinned in the dev extra; skipped when TRL is absent).

TRL computes group advantages inside its trainers' `_generate_and_score_completions` and the GRPO
loss inside `GRPOTrainer._compute_loss`, so we build real trainers on a tiny random GPT-2 and a
word-level tokenizer (tests/trl_tiny.py), hand them rewards we chose, and compare with
minirl.advantages and minirl.losses.grpo_loss on the same tensors. Our aggregation modes map to
TRL's `loss_type`: sequence_mean = "grpo", token_mean = "bnpo" (and "dapo" within one batch),
constant = "dr_grpo" with max_len = max_completion_length. DPO's loss lives in
`DPOTrainer._compute_loss`; we build a real DPOTrainer too and compare it with minirl.losses.dpo_loss
on log-probs from minirl.train.dpo.pair_logprobs.
"""
import pytest
import torch

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")

pytest.importorskip("trl", reason="TRL is not installed: `pip install -c constraints.txt -e .[dev]` pins it")

from minirl import advantages, losses  # noqa: E402
from minirl.lm.export import CONV1D, to_hf_gpt2  # noqa: E402
from minirl.lm.model import GPT, GPTConfig  # noqa: E402
from minirl.ops import token_logprobs  # noqa: E402
from minirl.train.dpo import pair_logprobs  # noqa: E402
from trl_tiny import dpo_trainer, random_prompts, special_ids, trainer, word_tokenizer  # noqa: E402

VOCAB, G, PROMPTS, NEW = 64, 4, 3, 6
# per group: spread rewards, all equal (zero advantage, never NaN), one success among failures
REWARDS = [0.0, 1.0, 2.0, 5.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]
LOSS_TYPES = [("sequence_mean", "grpo"), ("token_mean", "bnpo"), ("token_mean", "dapo"), ("constant", "dr_grpo")]


def build(kind, workdir, **config):
    torch.manual_seed(0)
    hf = to_hf_gpt2(GPT(GPTConfig(vocab_size=VOCAB, n_ctx=32, n_embd=32, n_layer=2, n_head=2)), **special_ids(VOCAB))

    def reward_fn(prompts, completions, **kwargs):
        return REWARDS[: len(completions)]
    prompts = random_prompts(PROMPTS, 5, VOCAB)
    tr = trainer(kind, hf, word_tokenizer(VOCAB), prompts, reward_fn, workdir, num_generations=G, batch_size=G * PROMPTS,
                 max_completion_length=NEW, **config)
    batch = tr._generate_and_score_completions([{"prompt": p} for p in prompts for _ in range(G)])
    return tr, batch


@pytest.mark.parametrize("scale", [True, False])
def test_group_normalize_matches_trl(scale, tmp_path):
    _, batch = build("grpo", tmp_path, beta=0.0, scale_rewards="group" if scale else "none")
    ours = advantages.group_normalize(torch.tensor(REWARDS), G, scale=scale)
    assert torch.allclose(batch["advantages"], ours, atol=1e-6)
    assert ours[4:8].eq(0).all()


def test_leave_one_out_matches_trl_rloo(tmp_path):
    _, batch = build("rloo", tmp_path, beta=0.0, normalize_advantages=False)
    assert torch.allclose(batch["advantages"], advantages.leave_one_out(torch.tensor(REWARDS), G), atol=1e-6)


def hf_completion_logprobs(model, batch):
    """log pi(a_t|s_t) of the completion tokens, written plainly from the model's logits."""
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    P = batch["prompt_ids"].size(1)
    logits = model(input_ids=ids, attention_mask=attn).logits[:, P - 1 : -1]
    return token_logprobs(logits, batch["completion_ids"])


@pytest.mark.parametrize("kl_ratio_weight", [False, True])
@pytest.mark.parametrize("aggregation, loss_type", LOSS_TYPES)
def test_grpo_loss_matches_trl(aggregation, loss_type, kl_ratio_weight, tmp_path):
    """Same batch, same old and reference log-probs (perturbed so the clip and the KL both act),
    same advantages: TRL's loss value and parameter gradients equal ours. TRL's
    use_bias_correction_kl (default True) is our kl_ratio_weight (default False, as in the paper)."""
    tr, batch = build("grpo", tmp_path, beta=0.04, loss_type=loss_type, epsilon=0.2,
                      use_bias_correction_kl=kl_ratio_weight)
    model = tr.model.train()
    assert batch["prompt_mask"].all(), "equal-length prompts: no left padding, so positions agree trivially"
    if loss_type == "dapo":  # DAPO divides by the generation batch's token count: one batch here
        assert batch["num_items_in_batch"].item() == batch["completion_mask"].sum().item()
    batch["completion_mask"][1, 2:] = 0  # ragged rows, as if EOS came early: the mask must matter
    batch["completion_mask"][5, 4:] = 0
    mask = batch["completion_mask"].float()
    batch["num_items_in_batch"] = mask.sum()
    with torch.no_grad():
        logp = hf_completion_logprobs(model, batch)
    g = torch.Generator().manual_seed(1)
    batch["old_per_token_logps"] = logp + 0.3 * torch.randn(logp.shape, generator=g)
    batch["ref_per_token_logps"] = logp + 0.5 * torch.randn(logp.shape, generator=g)
    batch["advantages"] = torch.randn(logp.size(0), generator=g)
    tr.current_gradient_accumulation_steps = 1

    model.zero_grad()
    trl_loss = tr._compute_loss(model, batch)
    trl_loss.backward()
    trl_grads = [p.grad.clone() for p in model.parameters()]

    model.zero_grad()
    ours, diag = losses.grpo_loss(hf_completion_logprobs(model, batch), batch["old_per_token_logps"],
                                  batch["ref_per_token_logps"], batch["advantages"], mask, clip_eps=0.2, beta=0.04,
                                  aggregation=aggregation, max_len=NEW,
                                  kl_ratio_weight=kl_ratio_weight)
    ours.backward()
    assert 0 < diag["clip_fraction"] < 1
    assert ours.item() == pytest.approx(trl_loss.item(), abs=1e-6)
    for a, b in zip(trl_grads, [p.grad for p in model.parameters()]):
        assert torch.allclose(a, b, atol=1e-6)


def ragged_pairs(n: int, seed: int = 3) -> list[dict]:
    """n preference pairs of word tokens: prompts of 2-4 words, responses of 1-5 (TRL adds EOS)."""
    g = torch.Generator().manual_seed(seed)

    def words(k):
        return " ".join(f"w{i}" for i in torch.randint(0, VOCAB - 2, (k,), generator=g).tolist())
    return [{"prompt": words(2 + i % 3), "chosen": " " + words(1 + i % 4), "rejected": " " + words(1 + 3 * i % 5)}
            for i in range(n)]


@pytest.mark.parametrize("loss_type, average", [("sigmoid", False), ("ipo", True)])
def test_dpo_loss_matches_trl(loss_type, average, tmp_path):
    """One collated batch of ragged pairs, a reference and a policy that differ (so the margins are
    not zero): TRL's DPO loss and gradients equal minirl.losses.dpo_loss on log-probs from
    minirl.train.dpo.pair_logprobs of our GPT with the same weights, and so do the implicit rewards TRL
    logs. 'sigmoid' takes summed log-probs. TRL's 'ipo' divides each side's log-ratio by its
    completion length (EOS included): our 'ipo' on per-token mean log-probs (average=True), whose
    rewards are TRL's divided by that length."""
    beta, n = 0.3, 6
    torch.manual_seed(0)
    reference = GPT(GPTConfig(vocab_size=VOCAB, n_ctx=32, n_embd=32, n_layer=2, n_head=2))
    policy = GPT(reference.config)
    policy.load_state_dict(reference.state_dict())
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p))
    tokenizer = word_tokenizer(VOCAB)
    policy_hf, reference_hf = (to_hf_gpt2(m, **special_ids(VOCAB)) for m in (policy, reference))
    tr = dpo_trainer(policy_hf, reference_hf, tokenizer, ragged_pairs(n), tmp_path, beta=beta, batch_size=n,
                     loss_type=loss_type)
    rows = [tr.train_dataset[i] for i in range(n)]
    batch = tr.data_collator(rows)
    assert batch["completion_mask"].sum(1).unique().numel() > 2, "ragged responses: the mask must matter"
    model = tr.model.train()
    trl_loss = tr.compute_loss(model, batch)
    trl_loss.backward()
    trl = {k: v[-1] for k, v in tr._metrics["train"].items()}

    items = [(r["prompt_ids"] + r["chosen_ids"], len(r["prompt_ids"]), r["prompt_ids"] + r["rejected_ids"], 1.0)
             for r in rows]
    pad = tokenizer.pad_token_id
    with torch.no_grad():
        ref_c, ref_r = pair_logprobs(reference, items, pad, average)
    ours, r_c, r_r = losses.dpo_loss(*pair_logprobs(policy, items, pad, average), ref_c, ref_r, beta, loss_type)
    ours.backward()
    assert (r_c - r_r).abs().min() > 1e-3
    assert ours.item() == pytest.approx(trl_loss.item(), abs=1e-5)
    hf = dict(model.named_parameters())
    for name, p in policy.named_parameters():
        g = hf[f"transformer.{name}"].grad
        assert torch.allclose(p.grad, g.t() if name.endswith(CONV1D) else g, atol=1e-5), name

    if average:  # back to TRL's rewards, beta times the summed log-ratio
        r_c = r_c * torch.tensor([len(r["chosen_ids"]) for r in rows])
        r_r = r_r * torch.tensor([len(r["rejected_ids"]) for r in rows])
    assert r_c.mean().item() == pytest.approx(trl["rewards/chosen"], abs=1e-5)
    assert r_r.mean().item() == pytest.approx(trl["rewards/rejected"], abs=1e-5)
    assert (r_c - r_r).mean().item() == pytest.approx(trl["rewards/margins"], abs=1e-5)
    assert losses.preference_accuracy(r_c, r_r) == pytest.approx(trl["rewards/accuracies"])  # no ties here
