"""GAIL on the plans world (Ho & Ermon 2016): a discriminator learns to tell the expert's plans from
the policy's, and the policy is trained by GRPO on the discriminator's opinion as its reward.

D(plan) = sigmoid(logit) = P(expert) (the course's convention; Ho & Ermon's D is P(policy)). The
discriminator's network is reward-model-shaped (`minirl.lm.reward_head.RewardModel`: a scalar head read
at the last token of prompt + completion + EOS) on the first `disc_layers` blocks of the base model's
trunk (two of six by default: on plans as accurate as all six, measured against the base, at less
than half the cost); call its output f. Its logit is one of (`DISCRIMINATORS`):

    gail   logit = f                               Ho & Ermon's: f must track log p_E - log pi as pi moves
    airl   logit = f - log(pi / pi_ref)            Fu et al.'s D = e^f / (e^f + pi), with pi measured
                                                   against the reference pi_ref (the base model)

Both are trained with `losses.gail_discriminator_loss` and have the same optimum,
D* = p_E / (p_E + pi). For 'airl' that optimum is f* = log p_E - log pi_ref whatever pi is: f holds a
reward that stays put while the policy moves, and text the reference finds unlikely is priced by
-log pi_ref (Fu et al. use the counting measure, pi_ref = 1, and a shaped f(s, a, s'); here f scores
whole completions, and pi_ref = the base makes f = 0 the right start, D = 1/2 against the base).

The policy's reward, one number per completion at its last token (`REWARD_FORMS`):

    log_d        log D                    always <= 0: each extra step can only cost
    neg_log_1m_d -log(1 - D)              always >= 0: each extra step can only earn
    logit        log D - log(1 - D)       the log-density ratio log p_E/p_pi at the optimum (AIRL's)

With one reward per sequence the sign does not bias length; the lesson measures where it does. With
'airl' and the logit, the reward is f - log(pi/pi_ref): the RLHF objective E[f] - KL(pi || pi_ref)
at beta = 1, whose optimum is pi_ref e^f / Z, so in principle the generator needs no KL term of its
own (GRPO's beta = 0). In practice GRPO at beta = 0 sometimes fell, within a few steps, into a state
it never left: in the run inspected, every sample a plan cut short (EOS before the full stop), each
paying about the same KL in its reward, so that group-normalized advantages had nothing pointing
back to the plans. GRPO's own per-token KL penalty pulls every sampled token toward the reference
whatever the rest of its group did; a small beta keeps the runs out of that trap at the price of a
flatter optimum, pi_ref e^{f / (1 + beta)} / Z (the lesson measures both).

Each generator step is: sample (GRPO's batch), `disc_steps` discriminator updates on the last
`policy_batches` batches of samples against `expert_batch` demonstrations, then the fresh samples
are scored by the updated discriminator and GRPO updates the policy. `pretrain` trains the
discriminator against a fixed policy first (a warm start). Everything about plans can be
enumerated (6^4 = 1,296 of them), so `plan_distribution` gives a policy's exact probability of each
plan and `expert_kl` the exact KL(expert || policy).
"""
from __future__ import annotations

import dataclasses
import random
from collections import deque
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..core import losses, validate
from ..lm.model import GPT, load_model
from ..lm.reward_head import RewardModel, from_base
from ..lm.sampling import sample
from ..lm.sequences import DEMO_FORM, check_leading_space, check_records, right_pad, sequence_ids, tokenized_logprobs
from ..lm.tokenizer import PAD, load_tokenizer
from ..world import generate, grammar, rewards
from ..world.tasks import plans_task
from .grpo import GRPOConfig, train_grpo
from .training import frozen_reference

__all__ = ["DISCRIMINATORS", "REWARD_FORMS", "PROMPT", "MAX_NEW_TOKENS", "GAILConfig", "policy_reward",
           "Discriminator", "pretrain", "train_gail", "plan_distribution", "plan_sequences", "expert_kl",
           "expected_true_reward", "expert_true_reward"]

DISCRIMINATORS = ("gail", "airl")
REWARD_FORMS = ("log_d", "neg_log_1m_d", "logit")
PROMPT = grammar.PROMPT_HEADS["plans"]
MAX_NEW_TOKENS = grammar.MAX_NEW_TOKENS["plans"]


@validate.known_options
@dataclass
class GAILConfig:
    """Settings of the discriminator D in `train_gail` and `Discriminator` (the policy's are a
    GRPOConfig).

    disc_lr         D's AdamW learning rate (no weight decay)
    disc_steps      D's updates per generator step (0: D stays as it is)
    expert_batch    demonstrations per update of D, drawn without replacement
    policy_batches  D trains on the policy's last this-many batches of samples (a replay buffer)
    disc_layers     D's network keeps the first this-many blocks of the base's trunk (2 of 6: on
                    plans as accurate as all six, at less than half the cost)
    discriminator   'airl' (logit f - log(pi / pi_ref)) or 'gail' (logit f); see `DISCRIMINATORS`
    reward_form     the policy's reward from D: 'log_d', 'neg_log_1m_d' or 'logit' (`REWARD_FORMS`)
    seed            seeds the demonstrations drawn for D and the samples of its warm start
    """
    disc_lr: float = 3e-4
    disc_steps: int = 1
    expert_batch: int = 256
    policy_batches: int = 1
    disc_layers: int = 2
    discriminator: str = "airl"
    reward_form: str = "logit"
    seed: int = 0

    def __post_init__(self):
        validate.number("disc_lr", self.disc_lr, 0.0, open_low=True)
        validate.integer("disc_steps", self.disc_steps, minimum=0)
        validate.integer("expert_batch", self.expert_batch)
        validate.integer("policy_batches", self.policy_batches)
        validate.integer("disc_layers", self.disc_layers)
        validate.choice("discriminator", self.discriminator, DISCRIMINATORS)
        validate.choice("reward_form", self.reward_form, REWARD_FORMS)
        validate.integer("seed", self.seed, minimum=-2**63)


def _check_demos(demos) -> None:
    """Demonstrations are a non-empty list of records {'prompt': 'plan:', 'completion': ' a b c d .'}
    (`datasets.load_demos()`): plans, written after the plans prompt."""
    check_records(demos, "demos", ("prompt", "completion"), DEMO_FORM)
    for n, d in enumerate(demos):
        if d["prompt"] != PROMPT:
            raise ValueError(f"demos[{n}] has prompt {d['prompt']!r}; GAIL here imitates plans, whose prompt is "
                             f"{PROMPT!r} (datasets.load_demos())")


def policy_reward(logits: torch.Tensor, form: str) -> torch.Tensor:
    """The generator's reward from discriminator logits, by `REWARD_FORMS`."""
    validate.choice("reward_form", form, REWARD_FORMS)
    if form == "log_d":
        return F.logsigmoid(logits)
    if form == "neg_log_1m_d":
        return -F.logsigmoid(-logits)
    return logits


class Discriminator:
    """D and its optimizer, as a TRL-style reward function for `train_grpo`: each call first trains D
    on the completions it is given against a batch of demonstrations, then scores them.

    policy: the generator, whose log-probabilities the 'airl' logit reads (not needed for 'gail').
    base: the reference pi_ref and the network's starting trunk (default: the shipped base model)."""

    def __init__(self, demos: list[dict], config: GAILConfig, policy: GPT | None = None, base: GPT | None = None,
                 tokenizer=None):
        if not isinstance(config, GAILConfig):
            raise TypeError(f"config must be a GAILConfig, got {type(config).__name__}")
        if config.discriminator == "airl" and not isinstance(policy, GPT):
            raise ValueError("the 'airl' discriminator reads the policy's log-probabilities: pass policy=, the GPT "
                             "being trained")
        _check_demos(demos)
        self.enc = tokenizer or load_tokenizer()
        self.config, self.policy = config, policy
        # without a base, the shipped one, on the policy's device (the CPU without a policy)
        device = next(policy.parameters()).device if isinstance(policy, GPT) else "cpu"
        self.reference = (base if base is not None else load_model("base", device=device)).eval()
        self.model: RewardModel = from_base(self.reference, self.enc)
        trunk = self.model.transformer
        if config.disc_layers > trunk.config.n_layer:
            raise ValueError(f"disc_layers={config.disc_layers}, but the base has {trunk.config.n_layer} blocks")
        trunk.h, trunk.config = trunk.h[: config.disc_layers], dataclasses.replace(trunk.config, n_layer=config.disc_layers)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=config.disc_lr, weight_decay=0.0)
        self.expert = [sequence_ids(self.enc, d["prompt"], d["completion"])[0] for d in demos]
        check_leading_space([d["completion"] for d in demos], "demonstrations")
        self.prompt_length = len(self.enc.encode(PROMPT))
        self.pad = self.enc.encode_single_token(PAD)
        self.rng = random.Random(config.seed)
        self.buffer: deque[list[list[int]]] = deque(maxlen=config.policy_batches)
        self.reference_cache: dict[tuple[int, ...], float] = {}
        self.history: list[dict] = []

    def f(self, seqs: list[list[int]]) -> torch.Tensor:
        """(B,) the network's score of each sequence, read at its own last token."""
        device = self.model.score.weight.device
        last = torch.tensor([len(s) - 1 for s in seqs], device=device)
        return self.model(right_pad(seqs, self.model.pad_token_id, device), last)

    @torch.no_grad()
    def log_prob(self, model: GPT, seqs: list[list[int]]) -> torch.Tensor:
        """(B,) log model(completion | 'plan:') of prompt + completion sequences."""
        return tokenized_logprobs(model, [(s, self.prompt_length) for s in seqs], self.pad)

    def reference_log_prob(self, seqs: list[list[int]]) -> torch.Tensor:
        """log pi_ref of each sequence, each computed once (the reference is frozen)."""
        new = list({tuple(s) for s in seqs} - self.reference_cache.keys())
        if new:
            self.reference_cache.update(zip(new, self.log_prob(self.reference, [list(s) for s in new]).tolist()))
        return torch.tensor([self.reference_cache[tuple(s)] for s in seqs], device=self.model.score.weight.device)

    def logits(self, seqs: list[list[int]]) -> torch.Tensor:
        """(B,) discriminator logits by `config.discriminator`."""
        f = self.f(seqs)
        if self.config.discriminator == "gail":
            return f
        return f - (self.log_prob(self.policy, seqs).to(f.device) - self.reference_log_prob(seqs))

    def update(self, policy_seqs: list[list[int]]) -> dict:
        """`disc_steps` steps of the discriminator loss: a fresh batch of demonstrations against the
        policy's samples in the buffer, `policy_seqs` added to it first."""
        self.buffer.append(policy_seqs)
        seen = [s for batch in self.buffer for s in batch]
        self.model.train()
        for _ in range(self.config.disc_steps):
            expert = self.rng.sample(self.expert, min(self.config.expert_batch, len(self.expert)))
            e, p = self.logits(expert), self.logits(seen)
            loss = losses.gail_discriminator_loss(e, p)
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
        stats = {"disc_loss": loss.item(), "d_expert": torch.sigmoid(e).mean().item(),
                 "d_policy": torch.sigmoid(p).mean().item()} if self.config.disc_steps else {}
        self.history.append(stats)
        return stats

    def __call__(self, prompts: list[str], completions: list[str], completion_ids: list[list[int]], **kwargs) -> list[float]:
        seqs = [self.enc.encode(p) + list(ids) for p, ids in zip(prompts, completion_ids)]
        self.update(seqs)
        self.model.eval()
        with torch.no_grad():
            return policy_reward(self.logits(seqs), self.config.reward_form).cpu().double().tolist()


def sample_plans(policy: GPT, n: int, generator: torch.Generator, enc) -> list[list[int]]:
    """n of the policy's completions of 'plan:' as prompt + completion token ids (EOS included)."""
    out = sample(policy, [PROMPT], max_new_tokens=MAX_NEW_TOKENS, group_size=n, generator=generator, tokenizer=enc)
    prompt = enc.encode(PROMPT)
    return [prompt + row[: int(k)] for row, k in zip(out.tokens.tolist(), out.mask.sum(1).tolist())]


def pretrain(disc: Discriminator, policy: GPT, steps: int, batch: int, generator: torch.Generator) -> list[dict]:
    """Train the discriminator against a fixed policy, `batch` fresh samples per step. At the optimum its
    logit is log p_E(plan) - log pi(plan): a learned reward, up to a constant, when pi is the base."""
    validate.integer("steps", steps, minimum=0)
    validate.integer("batch", batch)
    validate.generator_type(generator)
    return [disc.update(sample_plans(policy, batch, generator, disc.enc)) for _ in range(steps)]


def train_gail(policy: GPT, demos: list[dict], config: GAILConfig = GAILConfig(), grpo: GRPOConfig = GRPOConfig(beta=0.1),
               pretrain_steps: int = 0, tokenizer=None, callback=None) -> tuple[list[dict], Discriminator]:
    """Train `policy` in place by GAIL on demonstrations {'prompt', 'completion'} of plans: GRPO with
    `grpo`'s settings on the discriminator's reward; the policy as it starts is the reference pi_ref
    and the discriminator's starting trunk. pretrain_steps: first train the discriminator that many
    steps against the starting policy (a warm start; Ho & Ermon start both from scratch).
    callback(metrics, policy) after every step, as in `train_grpo`. Returns (GRPO's history with the
    discriminator's statistics merged in, the discriminator)."""
    if not isinstance(policy, GPT):
        raise TypeError(f"policy must be a minirl GPT, e.g. minirl.load_model('base'); got {type(policy).__name__}")
    if not isinstance(config, GAILConfig):
        raise TypeError(f"config must be a GAILConfig (the discriminator's settings), got {type(config).__name__}")
    if not isinstance(grpo, GRPOConfig):
        raise TypeError(f"grpo must be a GRPOConfig (the policy's settings), got {type(grpo).__name__}")
    validate.integer("pretrain_steps", pretrain_steps, minimum=0)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be a function callback(metrics, policy), got {type(callback).__name__}")
    disc = Discriminator(demos, config, policy=policy, base=frozen_reference(policy), tokenizer=tokenizer)
    batch = grpo.prompts_per_step * grpo.group_size
    pretrain(disc, policy, pretrain_steps, batch, torch.Generator().manual_seed(config.seed))
    disc.history.clear()
    history = train_grpo(policy, plans_task(), grpo, tokenizer=disc.enc, reward_fn=disc, callback=callback)
    for h, d in zip(history, disc.history):
        h.update(d)
    return history, disc


@torch.no_grad()
def plan_distribution(policy: GPT, tokenizer=None) -> tuple[list[tuple[str, ...]], torch.Tensor]:
    """Every plan (`generate.expert_plan_distribution()`'s order) and the policy's probability of writing
    it, pi('plan: a b c d .' + EOS | 'plan:') in its canonical tokens, float64, not renormalized (the
    rest of the policy's mass is invalid text or other spellings)."""
    enc = tokenizer or load_tokenizer()
    prompt_length = len(enc.encode(PROMPT))
    items = [(ids, prompt_length) for ids in plan_sequences(enc)]
    logp = tokenized_logprobs(policy, items, enc.encode_single_token(PAD)).cpu().double()
    return generate.expert_plan_distribution()[0], logp.exp()


def plan_sequences(tokenizer=None) -> list[list[int]]:
    """Every plan as prompt + completion + EOS token ids, in `generate.expert_plan_distribution()`'s order."""
    enc = tokenizer or load_tokenizer()
    return [sequence_ids(enc, PROMPT, " " + " ".join(p) + " .")[0] for p in generate.expert_plan_distribution()[0]]


def expert_kl(policy: GPT, tokenizer=None) -> float:
    """KL(p_E || pi) = sum over plans of p_E log(p_E / pi(plan)), exact: the expert writes only plans,
    so the policy's mass elsewhere enters only through what it leaves for them."""
    _, probs = plan_distribution(policy, tokenizer)
    expert = torch.tensor(generate.expert_plan_distribution()[1], dtype=torch.float64)
    return (expert * (expert.log() - probs.log())).sum().item()


def expected_true_reward(probs: torch.Tensor) -> float:
    """E[R] under a distribution over the plans, with the mass missing from the plans counted at
    INVALID_PLAN_REWARD."""
    plans, _ = generate.expert_plan_distribution()
    if not isinstance(probs, torch.Tensor):
        raise TypeError(f"probs must be a torch.Tensor of the plans' probabilities, got {type(probs).__name__} "
                        "(plan_distribution returns (plans, probs): pass its second item)")
    if (probs.shape != (len(plans),) or not bool(torch.isfinite(probs).all()) or bool((probs < 0).any())
            or probs.sum().item() > 1 + 1e-6):
        raise ValueError(f"probs must have shape ({len(plans)},), one finite probability >= 0 per plan in "
                         f"generate.expert_plan_distribution()'s order, summing to at most 1; got shape "
                         f"{tuple(probs.shape)}, sum {probs.sum().item():.6g}")
    r = torch.tensor([rewards.plan_reward(p) for p in plans], dtype=torch.float64)
    return ((probs * r).sum() + (1 - probs.sum()) * rewards.INVALID_PLAN_REWARD).item()


def expert_true_reward() -> float:
    return expected_true_reward(torch.tensor(generate.expert_plan_distribution()[1], dtype=torch.float64))
