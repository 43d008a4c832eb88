"""Losses whose gradients are the estimators of the course.

A *surrogate* loss is built so that its gradient is the estimator we want; its value means
nothing (it is not J, and it can go up while the policy gets better). Every loss takes
completion-only (B, T) tensors with a 0/1 `mask` (the conventions of docs/conventions.md) and
raises a clear error on a row whose mask is all zero.

Aggregation over tokens is explicit and named, because it changes what is estimated:

    sequence_sum   sum over a row's tokens, mean over rows: (1/B) sum_i sum_t x_it. With x = A_t *
                   log pi(a_t|s_t) this is exactly the policy-gradient estimator.
    sequence_mean  token mean within each row, then mean over rows (the GRPO paper): long
                   completions get less weight per token.
    token_mean     one mean over every token of the batch (DAPO): long completions weigh more.
    constant       sum over all tokens divided by B * max_len (Dr. GRPO), a constant that does
                   not depend on the lengths sampled.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from . import validate
from .corrections import geometric_sequence_ratio
from .kl import _k3
from .ops import check_float, check_mask, masked_mean, masked_sum, token_logprobs, zero_padding

__all__ = ["AGGREGATIONS", "aggregate", "policy_gradient_loss", "clipped_objective", "ppo_clip_loss", "grpo_loss",
           "gspo_loss", "cispo_loss", "value_loss", "sft_loss", "bradley_terry_loss", "DPO_LOSS_TYPES", "dpo_loss", "simpo_loss",
           "preference_accuracy", "gail_discriminator_loss"]

AGGREGATIONS = ("sequence_sum", "sequence_mean", "token_mean", "constant")


def _rows_mask(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """mask as bool, after checking x is (B, T), the mask matches and no row is all padding (a
    boolean mask skips the 0/1 check when it is checked again)."""
    if x.dim() != 2:
        raise ValueError(f"expected a (B, T) tensor, got shape {tuple(x.shape)}")
    m = check_mask(x, mask).bool()
    if bool((~m.any(dim=1)).any()):
        raise ValueError("a row of mask is all zeros: every completion needs at least one token (EOS counts)")
    return m


def aggregate(x: torch.Tensor, mask: torch.Tensor, mode: str, max_len: int | None = None) -> torch.Tensor:
    """Reduce per-token values x (B, T) to a scalar by one of `AGGREGATIONS`.

    max_len: the constant of mode 'constant' (default T, the width of the batch; at least T).
    """
    m = _rows_mask(x, mask)
    if max_len is not None and validate.integer("max_len", max_len) < x.size(1):
        raise ValueError(f"max_len={max_len} is shorter than the batch's {x.size(1)} tokens; it is the longest "
                         "completion the sampler may produce")
    if mode == "sequence_sum":
        return masked_sum(x, m, dim=1).mean()
    if mode == "sequence_mean":
        return masked_mean(x, m, dim=1).mean()
    if mode == "token_mean":
        return masked_mean(x, m)
    if mode == "constant":
        return masked_sum(x, m) / (x.size(0) * (max_len or x.size(1)))
    raise ValueError(f"unknown aggregation {mode!r}; choose one of {AGGREGATIONS}")


def policy_gradient_loss(logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                         aggregation: str = "sequence_sum") -> torch.Tensor:
    """Surrogate -aggregate(A_t * log pi(a_t|s_t)), whose gradient is the policy-gradient estimator.

    logprobs: (B, T) log-probs of the sampled tokens under the current policy (with gradient).
    advantages: (B, T) per token, or (B,) one per completion (broadcast to its tokens); treated
    as constants (detached). With aggregation 'sequence_sum' the gradient is exactly
    -(1/B) sum_i sum_t A_it grad log pi(a_it | s_it).
    """
    m, logprobs, advantages = per_token_inputs(mask, logprobs=logprobs, advantages=advantages)
    return -aggregate(advantages * logprobs, m, aggregation)


def per_token_inputs(mask: torch.Tensor, **tensors: torch.Tensor) -> list[torch.Tensor]:
    """[mask as bool, *the named (B, T) tensors], checked against each other and the mask, with
    padding set to 0 (the checked boolean mask is cheap to check again in `aggregate`).

    The first is the one the loss differentiates (log-probs, values) and keeps its gradient; the
    others are constants (advantages, old and reference log-probs, returns) and come back
    detached, each (B, T) or (B,) one value per completion (broadcast to its tokens). Padding is
    zeroed *before* any arithmetic, so an inf or NaN there reaches neither the loss nor its gradient.
    """
    (first, live), *others = tensors.items()
    check_float(first, live)
    out = [live]
    for name, x in others:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if not x.is_floating_point():
            x = x.to(live.dtype)  # integer advantages are fine: nothing here can truncate them
        if x.dim() == 1 and live.dim() == 2 and x.size(0) == live.size(0):
            x = x[:, None].expand_as(live)
        if x.shape != live.shape:
            raise ValueError(f"{name} shape {tuple(x.shape)} does not match {first} shape {tuple(live.shape)}")
        out.append(x.detach())
    m = _rows_mask(live, mask)
    return [m, *(zero_padding(x, m) for x in out)]


def clipped_objective(ratio: torch.Tensor, advantages: torch.Tensor, clip_eps: float,
                      clip_eps_high: float | None = None) -> torch.Tensor:
    """min(ratio A, clip(ratio, 1 - eps, 1 + eps_high) A) per token, ratio = pi_theta / pi_old.

    The ratio is always positive; the advantage carries the sign. With A > 0 the objective stops
    rewarding a ratio above 1 + eps_high; with A < 0, a ratio below 1 - eps. eps_high defaults to
    eps (PPO); a larger one is DAPO's "clip-higher". A negative ratio is refused: it is most
    likely a log-ratio, which needs .exp() first.
    """
    validate.number("clip_eps", clip_eps, 0.0, finite=False)  # inf: no clipping
    high = clip_eps if clip_eps_high is None else validate.number("clip_eps_high", clip_eps_high, 0.0, finite=False)
    if bool((ratio < 0).any()):
        raise ValueError("ratio must be positive (pi_theta / pi_old); it has negative entries. "
                         "If you hold log-ratios, pass log_ratio.exp()")
    return torch.minimum(ratio * advantages, ratio.clamp(1 - clip_eps, 1 + high) * advantages)


def _clip_fraction(ratio: torch.Tensor, mask: torch.Tensor, clip_eps: float, clip_eps_high: float | None) -> float:
    high = clip_eps if clip_eps_high is None else clip_eps_high
    return masked_mean(((ratio < 1 - clip_eps) | (ratio > 1 + high)).to(ratio.dtype), mask).item()


def ppo_clip_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                  clip_eps: float = 0.2, aggregation: str = "token_mean") -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's clipped surrogate (Schulman et al., 2017), per token, and its diagnostics.

        ratio_t = pi_theta(a_t|s_t) / pi_old(a_t|s_t)      pi_old: the policy that *collected* the batch
        loss    = -aggregate(min(ratio_t A_t, clip(ratio_t, 1 - eps, 1 + eps) A_t))

    Returns (loss, diagnostics) over the action tokens (the mask): `clip_fraction` (share of
    tokens whose ratio lies outside [1 - eps, 1 + eps]) and `approx_kl` (the k3 estimate of
    KL(pi_old || pi_theta), the tokens being pi_old's samples).
    """
    m, logprobs, old_logprobs, advantages = per_token_inputs(mask, logprobs=logprobs, old_logprobs=old_logprobs,
                                                             advantages=advantages)
    ratio = (logprobs - old_logprobs).exp()
    loss = -aggregate(clipped_objective(ratio, advantages, clip_eps), m, aggregation)
    with torch.no_grad():
        diagnostics = {"clip_fraction": _clip_fraction(ratio, m, clip_eps, None),
                       "approx_kl": masked_mean(_k3(old_logprobs - logprobs), m).item()}
    return loss, diagnostics


def grpo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, ref_logprobs: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, clip_eps: float = 0.2, beta: float = 0.04, aggregation: str = "sequence_mean",
              max_len: int | None = None, clip_eps_high: float | None = None,
              kl_ratio_weight: bool = False,
              is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO's loss (Shao et al., 2024): the clipped surrogate plus beta * KL to the reference, per token.

        loss_t = -min(ratio_t A_i, clip(ratio_t, 1 - eps, 1 + eps) A_i) + beta * k3_t
        k3_t   = pi_ref(a_t)/pi_theta(a_t) - 1 - log(pi_ref(a_t)/pi_theta(a_t))

    advantages: (B,) one per completion (group-normalized rewards) or (B, T). The KL sits in the
    *loss*, not in the reward as in PPO-RLHF; as a loss k3's expected gradient is that of
    KL(pi_ref || pi_theta) at each visited state (minirl.kl). Default aggregation 'sequence_mean'
    (each completion's token mean, then the batch mean) as in the paper; 'token_mean' (DAPO) and
    'constant' with max_len (Dr. GRPO, max_len = the maximum completion length) are the others.
    The tokens were sampled from pi_old, not pi_theta; after the first inner step, k3 on them
    estimates the KL of the wrong policy. kl_ratio_weight=True multiplies k3 by the ratio
    pi_theta/pi_old (importance sampling; TRL's `use_bias_correction_kl`, on by default there);
    the paper, and our default, leave it out. At the first inner step the ratio is 1 and both agree.
    is_weights: (B, T) constant weights, finite and >= 0, on each token's policy term (not its KL),
    for tokens another policy sampled (`minirl.core.corrections.importance_weights`; TRL multiplies
    its vLLM correction in the same place). clip_eps_high: the upper clip 1 + eps_high (DAPO's clip-higher).
    Returns (loss, diagnostics): clip_fraction, kl (mean k3 per token), ratio_mean.
    """
    validate.number("beta", beta, 0.0)
    weights = torch.ones_like(logprobs) if is_weights is None else is_weights
    m, logprobs, old_logprobs, ref_logprobs, advantages, weights = per_token_inputs(
        mask, logprobs=logprobs, old_logprobs=old_logprobs, ref_logprobs=ref_logprobs, advantages=advantages,
        is_weights=weights)
    if not bool(((weights >= 0) & torch.isfinite(weights)).all()):
        raise ValueError("is_weights must be finite and >= 0 on every real token (importance weights are ratios)")
    ratio = (logprobs - old_logprobs).exp()
    kl = _k3(logprobs - ref_logprobs)
    kl_term = kl * ratio if kl_ratio_weight else kl
    per_token = -weights * clipped_objective(ratio, advantages, clip_eps, clip_eps_high) + beta * kl_term
    loss = aggregate(per_token, m, aggregation, max_len)
    with torch.no_grad():
        diagnostics = {"clip_fraction": _clip_fraction(ratio, m, clip_eps, clip_eps_high),
                       "kl": masked_mean(kl, m).item(), "ratio_mean": masked_mean(ratio, m).item()}
    return loss, diagnostics


def gspo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
              clip_eps: float = 3e-4, clip_eps_high: float | None = 4e-4) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO's loss (Zheng et al., 2025): PPO's clip on one ratio per completion,

        s_i  = (pi_theta(y_i|x) / pi_old(y_i|x))^(1/|y_i|)      (`corrections.geometric_sequence_ratio`)
        loss = -mean_i min(s_i A_i, clip(s_i, 1 - eps, 1 + eps_high) A_i)

    Its gradient is s_i A_i times the completion's *mean* token score, so the 1/|y| of GRPO's
    sequence_mean aggregation is built in; at s_i = 1 (on-policy) the gradient equals GRPO's with
    'sequence_mean'. The paper's clip range is narrow, 3e-4 and 4e-4, because s_i is a mean over
    tokens and moves far less than a token ratio. advantages: (B,), one per completion. No KL term
    (the paper uses none). Returns (loss, diagnostics): clip_fraction (share of completions
    clipped), ratio_mean."""
    if advantages.dim() != 1 or advantages.size(0) != logprobs.size(0):
        raise ValueError(f"GSPO takes one advantage per completion, ({logprobs.size(0)},); got shape "
                         f"{tuple(advantages.shape)}")
    m, logprobs, old_logprobs = per_token_inputs(mask, logprobs=logprobs, old_logprobs=old_logprobs)
    check_float("advantages", advantages)
    if not bool(torch.isfinite(advantages).all()):
        raise ValueError("advantages must be finite: a NaN or inf advantage would make the loss NaN (check the "
                         "rewards that made them)")
    s = geometric_sequence_ratio(logprobs, old_logprobs, m)  # (B,)
    loss = -clipped_objective(s, advantages.detach(), clip_eps, clip_eps_high).mean()
    with torch.no_grad():
        rows = torch.ones_like(s, dtype=torch.bool)
        diagnostics = {"clip_fraction": _clip_fraction(s, rows, clip_eps, clip_eps_high), "ratio_mean": s.mean().item()}
    return loss, diagnostics


def cispo_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
               weight_cap: float = 5.0, aggregation: str = "token_mean") -> tuple[torch.Tensor, dict[str, float]]:
    """CISPO's loss (MiniMax, 2025): clip the importance *weight*, not the update.

        loss_t = -sg(min(ratio_t, weight_cap)) A_t log pi_theta(a_t|s_t),   ratio_t = pi_theta / pi_old

    PPO's clip zeroes the gradient of a token whose ratio left the range, so a rare token that
    moved a lot stops learning; CISPO keeps every token's gradient and only bounds its weight. At
    ratio 1 (on-policy) the gradient equals the plain policy gradient under `aggregation`
    ('token_mean', DAPO's, as in the paper). weight_cap: the largest weight, at least 1 (the paper's
    1 + eps_high; TRL's `epsilon_high` under loss_type='cispo' is the cap itself, 5.0 suggested there
    after ScaleRL). Returns (loss, diagnostics): capped_fraction, ratio_mean."""
    validate.number("weight_cap", weight_cap, 1.0, finite=False)
    m, logprobs, old_logprobs, advantages = per_token_inputs(mask, logprobs=logprobs, old_logprobs=old_logprobs,
                                                             advantages=advantages)
    ratio = (logprobs - old_logprobs).exp()
    weight = ratio.detach().clamp(max=weight_cap)
    loss = -aggregate(weight * advantages * logprobs, m, aggregation)
    with torch.no_grad():
        diagnostics = {"capped_fraction": masked_mean((ratio > weight_cap).to(ratio.dtype), m).item(),
                       "ratio_mean": masked_mean(ratio, m).item()}
    return loss, diagnostics


def value_loss(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, old_values: torch.Tensor | None = None,
               clip_range: float | None = None, aggregation: str = "token_mean") -> torch.Tensor:
    """0.5 * (V - R)^2 over response tokens; returns are targets (detached).

    With `clip_range` (PPO's value clipping, needs `old_values`): the new value may move at most
    clip_range from the value at collection time, and the loss is the larger of the clipped and
    unclipped errors, max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2) / 2.
    """
    for name, x in (("returns", returns), ("old_values", old_values)):
        if isinstance(x, torch.Tensor) and isinstance(values, torch.Tensor) and x.shape != values.shape:
            raise ValueError(f"{name} must have the shape of values, {tuple(values.shape)}: one target per token "
                             f"(advantages.reward_to_go or gae give it), got {tuple(x.shape)}")
    if clip_range is None:
        m, values, returns = per_token_inputs(mask, values=values, returns=returns)
        err = (values - returns) ** 2
    else:
        validate.number("clip_range", clip_range, 0.0, finite=False)
        if old_values is None:
            raise ValueError("value clipping needs old_values, the values at collection time")
        m, values, returns, old_values = per_token_inputs(mask, values=values, returns=returns, old_values=old_values)
        clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
        err = torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
    return 0.5 * aggregate(err, m, aggregation)


def sft_loss(logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Supervised fine-tuning (behaviour cloning): mean negative log-likelihood of the response
    tokens only. logits (B, T, V) predict tokens (B, T); mask (B, T) is 1 on response tokens, so
    the prompt is context, never a target. Logits on masked positions are replaced by 0 first, so
    junk there (NaN included) reaches neither the loss nor its gradient."""
    check_float("logits", logits)
    if not isinstance(tokens, torch.Tensor) or logits.dim() != 3 or tokens.dim() != 2 or logits.shape[:2] != tokens.shape:
        got = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise ValueError(f"sft_loss takes logits (B, T, V) predicting tokens (B, T) at the same positions, got logits "
                         f"{tuple(logits.shape)} and tokens {got}: shift them first (logits[:, :-1] predict "
                         "tokens[:, 1:])")
    logits = torch.where(check_mask(tokens, mask).bool()[..., None], logits, torch.zeros_like(logits))
    return -aggregate(token_logprobs(logits, tokens), mask, "token_mean")


def bradley_terry_loss(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor, labels: torch.Tensor | None = None,
                       margin: float | torch.Tensor = 0.0) -> torch.Tensor:
    """The reward model's ranking loss: the Bradley-Terry negative log-likelihood, mean over pairs.

        P(chosen preferred) = sigmoid(r_c - r_r)
        loss = -[y log sigmoid(r_c - r_r - m) + (1 - y) log sigmoid(r_r - r_c - m)]

    chosen_rewards, rejected_rewards: (B,) scalar rewards of the two responses of each pair.
    labels: (B,) y = P(chosen preferred) in [0, 1]; 1 by default (a hard label), 1/2 for a tie.
    margin: a scalar or (B,) m >= 0 (Llama 2's margin loss): the preferred side must win by m
    before the loss lets go; with y = 1 this is TRL's `-logsigmoid(r_c - r_r - margin)`. A tie
    with a margin asks for |r_c - r_r| small on both sides.

    Stiennon et al.'s -log sigmoid(r_c - r_r) and Askell et al.'s log(1 + exp(r_r - r_c)) are this
    loss with y = 1, m = 0: the same function written twice. At r_c = r_r it is log 2 whatever y is.
    """
    check_float("chosen_rewards", chosen_rewards)
    check_float("rejected_rewards", rejected_rewards)
    if chosen_rewards.dim() != 1 or chosen_rewards.shape != rejected_rewards.shape:
        raise ValueError(f"chosen_rewards and rejected_rewards must be (B,) tensors of one shape, got "
                         f"{tuple(chosen_rewards.shape)} and {tuple(rejected_rewards.shape)} (one reward per response)")
    if chosen_rewards.numel() == 0:
        raise ValueError("no pairs: the Bradley-Terry loss needs at least one (chosen, rejected) pair")
    delta = chosen_rewards - rejected_rewards  # (B,)
    if not bool(torch.isfinite(delta).all()):  # NaN or inf in either side reaches the difference
        _check_finite(chosen_rewards=chosen_rewards, rejected_rewards=rejected_rewards)
    y = torch.ones_like(delta) if labels is None else torch.as_tensor(labels, dtype=delta.dtype, device=delta.device)
    if y.shape != delta.shape:
        raise ValueError(f"labels shape {tuple(y.shape)} does not match the {delta.numel()} pairs")
    if not bool(((y >= 0) & (y <= 1)).all()):
        lo, hi = torch.stack(torch.aminmax(y)).tolist()
        raise ValueError(f"labels must be probabilities P(chosen preferred) in [0, 1] (1/2 for a tie), got values from "
                         f"{lo:g} to {hi:g}. Labels +1/-1? pass (y + 1) / 2. Reward differences? pass their "
                         "torch.sigmoid (the Bradley-Terry probability)")
    m = torch.as_tensor(margin, dtype=delta.dtype, device=delta.device)
    if not bool(torch.isfinite(m).all() & (m >= 0).all()):
        raise ValueError(f"margin must be finite and >= 0, got {margin!r}")
    nll = -(y * F.logsigmoid(delta - m) + (1 - y) * F.logsigmoid(-delta - m))  # (B,)
    return nll.mean()


DPO_LOSS_TYPES = ("sigmoid", "ipo")


def _check_finite(**tensors: torch.Tensor) -> None:
    """Raise a ValueError naming the first tensor that holds NaN or inf (called once a check on
    something computed from them failed, so the common case reads nothing back)."""
    for name, x in tensors.items():
        bad = ~torch.isfinite(x.detach())
        if bool(bad.any()):
            k = int(bad.flatten().nonzero()[0])
            raise ValueError(f"{name} holds NaN or inf ({int(bad.sum())} of {x.numel()} entries; the first, at [{k}], "
                             f"is {x.flatten()[k].item()}): what is computed from it is NaN or meaningless, and a "
                             "trainer would then blame the learning rate. Find where it came from (a log of 0, a "
                             "division by 0, a diverged model)")


def _pair_tensors(log_probs: bool, **tensors: torch.Tensor) -> None:
    """Check that every tensor is a float (B,) of one shape with B >= 1, every entry finite, and with
    `log_probs` every entry <= 0 (a sequence log-prob; a probability or a reward is refused). One
    read-back for all of them; the diagnosis runs only when it fails."""
    first = None
    for name, x in tensors.items():
        check_float(name, x)
        if x.dim() != 1 or (first is not None and x.shape != first.shape):
            shapes = {k: tuple(v.shape) for k, v in tensors.items()}
            raise ValueError(f"{', '.join(tensors)} must be (B,) tensors of one shape (one sequence log-prob per "
                             f"response), got {shapes}")
        if first is not None and x.device != first.device:
            raise ValueError(f"{name} is on {x.device} but {next(iter(tensors))} on {first.device}: compute both on "
                             f"one device, or move one with .to({str(first.device)!r})")
        first = x if first is None else first
    if first.numel() == 0:
        raise ValueError("no pairs: the loss needs at least one (chosen, rejected) pair")
    fine = [(torch.isfinite(x) & (x <= 0) if log_probs else torch.isfinite(x)).all() for x in tensors.values()]
    if bool(torch.stack(fine).all()):
        return
    _check_finite(**tensors)
    for name, x in tensors.items():
        if bool((x > 0).any()):
            raise ValueError(f"{name} must hold log-probabilities log pi(y | x) <= 0, but {int((x > 0).sum())} of "
                             f"its {x.numel()} entries are positive (the largest {x.max().item():.4g}). Probabilities? "
                             "pass their .log(). Rewards or logits? they are not log-probs: score each response with "
                             "minirl.lm.sequences.sequence_logprobs")


def check_label_smoothing(label_smoothing: float) -> float:
    """`label_smoothing` after checking it lies in [0, 1/2): the probability that a label is flipped."""
    eps = validate.number("label_smoothing", label_smoothing, 0.0)
    if eps >= 0.5:
        raise ValueError(f"label_smoothing must be below 0.5, got {label_smoothing!r}: it is the probability that a "
                         "label is flipped, so at 0.5 every label is a coin flip, the loss is symmetric in the margin "
                         "and its gradient is zero at the reference (nothing trains); above it the labels say the "
                         "opposite. Use the label noise you expect, e.g. 0.1 (minirl.train.dpo.label_noise measures "
                         "the orders world's), or swap chosen and rejected")
    return eps


def dpo_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor, ref_chosen_logps: torch.Tensor,
             ref_rejected_logps: torch.Tensor, beta: float, loss_type: str = "sigmoid",
             label_smoothing: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Direct preference optimization (Rafailov et al. 2023) and IPO (Azar et al. 2023), mean over pairs.

    Inputs are (B,) sequence log-probs log pi(y | x) of the chosen and rejected responses under the
    policy (with gradient) and the frozen reference. With the log-ratio margin

        h = [log pi(y_c) - log pi_ref(y_c)] - [log pi(y_r) - log pi_ref(y_r)]

    'sigmoid' (DPO):  -(1 - eps) log sigmoid(beta h) - eps log sigmoid(-beta h)
                      the Bradley-Terry loss of the implicit reward beta log(pi / pi_ref); eps =
                      `label_smoothing`, the probability that a label is flipped (conservative DPO,
                      Mitchell 2023), in [0, 1/2): the loss of soft labels y = 1 - eps. It is log 2 at
                      pi = pi_ref.
    'ipo':            (h - (1 - 2 eps) / (2 beta))^2
                      IPO's squared loss: with hard labels (eps = 0) the margin's target is
                      1/(2 beta), Azar et al.'s 1/(2 tau); with eps it is the target of a soft label
                      y = 1 - eps, (y - 1/2)/beta. Azar et al. define no label smoothing for IPO;
                      TRL's 'ipo' ignores it.

    Returns (loss, chosen_rewards, rejected_rewards): the implicit rewards beta * (log pi - log
    pi_ref) of each response, (B,), detached (they are for reading, not for gradients). Every input
    must be finite and <= 0 (a log-probability); label_smoothing 1/2 is refused (nothing trains).
    """
    _pair_tensors(True, policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps,
                  ref_chosen_logps=ref_chosen_logps, ref_rejected_logps=ref_rejected_logps)
    validate.number("beta", beta, 0.0, open_low=True)
    validate.choice("loss_type", loss_type, DPO_LOSS_TYPES)
    check_label_smoothing(label_smoothing)
    chosen = policy_chosen_logps - ref_chosen_logps  # (B,) log pi/pi_ref of y_c
    rejected = policy_rejected_logps - ref_rejected_logps
    h = chosen - rejected  # (B,)
    if loss_type == "sigmoid":
        losses = -(1 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)
    else:
        losses = (h - (1 - 2 * label_smoothing) / (2 * beta)) ** 2
    return losses.mean(), beta * chosen.detach(), beta * rejected.detach()


def simpo_loss(chosen_avg_logps: torch.Tensor, rejected_avg_logps: torch.Tensor, beta: float,
               gamma: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """SimPO (Meng et al. 2024): no reference model; the reward is the length-normalized log-prob
    beta * (1/|y|) log pi(y | x), and the chosen side must win by a margin gamma:

        loss = -log sigmoid(beta * (avg_c - avg_r) - gamma),   mean over pairs

    chosen_avg_logps, rejected_avg_logps: (B,) *per-token mean* log-probs of each response.
    Returns (loss, chosen_rewards, rejected_rewards), the rewards beta * avg log-prob, detached.
    TRL writes the same loss as beta * (avg_c - avg_r - gamma / beta)."""
    _pair_tensors(True, chosen_avg_logps=chosen_avg_logps, rejected_avg_logps=rejected_avg_logps)
    validate.number("beta", beta, 0.0, open_low=True)
    validate.number("gamma", gamma, 0.0)
    loss = -F.logsigmoid(beta * (chosen_avg_logps - rejected_avg_logps) - gamma).mean()
    return loss, beta * chosen_avg_logps.detach(), beta * rejected_avg_logps.detach()


def preference_accuracy(chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor) -> float:
    """The share of pairs whose chosen response has the higher reward, a tie counting 1/2: at the
    start of DPO every implicit reward is 0, so the accuracy there is 1/2, not 0."""
    _pair_tensors(False, chosen_rewards=chosen_rewards, rejected_rewards=rejected_rewards)
    wins = (chosen_rewards > rejected_rewards).double() + 0.5 * (chosen_rewards == rejected_rewards).double()
    return wins.mean().item()


def gail_discriminator_loss(expert_logits: torch.Tensor, policy_logits: torch.Tensor) -> torch.Tensor:
    """GAIL's discriminator loss (Ho & Ermon 2016), with D = sigmoid(logit) = P(expert): binary
    cross-entropy with label 1 on the expert's samples and 0 on the policy's,

        loss = 1/2 [ mean over expert of -log D  +  mean over policy of -log(1 - D) ]

    so the two classes weigh the same whatever the batch sizes, and the minimizer over all
    discriminators is D*(tau) = p_E(tau) / (p_E(tau) + p_pi(tau)); log 2 at D = 1/2 everywhere.
    Deviation: Ho & Ermon write D as the probability of the *policy* (D = 1 on the learner); the
    course fixes D = P(expert), the convention of most libraries. expert_logits (n,), policy_logits (m,)."""
    check_float("expert_logits", expert_logits)
    check_float("policy_logits", policy_logits)
    if expert_logits.dim() != 1 or policy_logits.dim() != 1 or not expert_logits.numel() or not policy_logits.numel():
        raise ValueError(f"expert_logits and policy_logits must be non-empty 1-D tensors (one logit per sample), got "
                         f"{tuple(expert_logits.shape)} and {tuple(policy_logits.shape)}")
    return 0.5 * (-F.logsigmoid(expert_logits).mean() - F.logsigmoid(-policy_logits).mean())
