"""Export to Hugging Face, for students moving on to TRL: the policy as `GPT2LMHeadModel`, a reward
model as `GPT2ForSequenceClassification`, a critic and a process reward model as
`GPT2ForTokenClassification`, the tokenizer as
a fast tokenizer, and `save` writing them to one folder that `from_pretrained` loads offline.

Our layout is GPT-2's, so the model export is a rename plus a transpose: GPT-2 stores its linear
layers as Conv1D with weights (in, out), where `nn.Linear` keeps (out, in). The activation must
be GPT-2's tanh approximation ("gelu_new"), dropout off, and LayerNorm eps 1e-5.
"""
from __future__ import annotations

from pathlib import Path

import torch

from .critic import ValueHead
from .model import GPT
from .process_head import ProcessRewardModel
from .reward_head import RewardModel, check_pad_id, check_reward_model
from .sampling import positions_from_mask
from .tokenizer import EOS, PAD, SPECIAL_TOKENS, load_ranks, load_tokenizer

__all__ = ["PLAIN_CHAT_TEMPLATE", "CONV1D", "hf_state_dict", "course_special_ids", "hf_config", "to_hf_gpt2",
           "use_mask_positions", "load_weights", "to_hf_reward_model", "to_hf_critic", "to_hf_prm", "to_hf_tokenizer", "save"]

# the messages' contents, concatenated, nothing added (no roles, no generation prompt)
PLAIN_CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def hf_state_dict(model: GPT) -> dict:
    """Our state dict under GPT-2's names, with Conv1D weights transposed."""
    out = {}
    for name, tensor in model.state_dict().items():
        out[f"transformer.{name}"] = tensor.t().contiguous() if name.endswith(CONV1D) else tensor
    out["lm_head.weight"] = model.wte.weight.detach()  # tied
    return out


def course_special_ids() -> tuple[int, int]:
    """(EOS id, PAD id) of the course tokenizer: 504 and 505 of its 506 tokens."""
    enc = load_tokenizer()
    return enc.eot_token, enc.encode_single_token(PAD)


def hf_config(model: GPT, eos_token_id: int | None = None, pad_token_id: int | None = None):
    """The `transformers.GPT2Config` of our model's shape and numerics, with EOS (also BOS) and PAD
    ids inside its vocabulary: the course tokenizer's unless given (a model on another tokenizer
    must give its own; GPT2Config's default, 50256, lies outside a 506-token vocabulary)."""
    from transformers import GPT2Config

    c = model.config
    course_eos, course_pad = course_special_ids()
    eos = course_eos if eos_token_id is None else eos_token_id
    pad = course_pad if pad_token_id is None else pad_token_id
    for name, i in (("eos_token_id", eos), ("pad_token_id", pad)):
        if not 0 <= i < c.vocab_size:
            raise ValueError(f"{name}={i} is outside the model's vocabulary of {c.vocab_size} tokens: pass the ids "
                             "of your tokenizer's EOS and padding tokens (to_hf_gpt2(model, eos_token_id=..., pad_token_id=...))")
    return GPT2Config(
        vocab_size=c.vocab_size, n_positions=c.n_ctx, n_embd=c.n_embd, n_layer=c.n_layer, n_head=c.n_head,
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        layer_norm_epsilon=1e-5, tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos, pad_token_id=pad,
    )


def to_hf_gpt2(model: GPT, eos_token_id: int | None = None, pad_token_id: int | None = None):
    """A `transformers.GPT2LMHeadModel` with the same weights (and so the same logits); its config and
    generation config carry the EOS/BOS and PAD ids (the course tokenizer's unless given)."""
    from transformers import GenerationConfig, GPT2LMHeadModel

    if not isinstance(model, GPT):
        hint = " (a reward model exports with to_hf_reward_model)" if isinstance(model, RewardModel) else ""
        raise TypeError(f"to_hf_gpt2 exports the course's GPT, got {type(model).__name__}{hint}")
    hf = load_weights(GPT2LMHeadModel(hf_config(model, eos_token_id, pad_token_id)), hf_state_dict(model))
    c = hf.config
    hf.generation_config = GenerationConfig(bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id,
                                            pad_token_id=c.pad_token_id)
    return hf


def use_mask_positions(hf):
    """Make a Hugging Face model number positions from its attention mask when a caller gives no
    position_ids, as `generate()` does and our model always does; returns the model.

    GPT-2 learns absolute position embeddings. Called with left-padded rows and no position_ids, HF's
    GPT-2 numbers the padding too, so a row's first real token sits at position 2 instead of 0 and
    its logits change (by up to 16 on the course's prompts). TRL computes the training log-probs that
    way (only `generate()` passes positions), so without this hook the policy is scored at other
    positions than it sampled at. Rotary models (Llama, Qwen) are untouched by the shift, which is
    why it goes unnoticed there. The hook fills in our sampler's positions (`positions_from_mask`) for
    the tokens given."""
    def fill_positions(module, args, kwargs):
        mask, ids = kwargs.get("attention_mask"), kwargs.get("input_ids", args[0] if args else None)
        if kwargs.get("position_ids") is None and mask is not None and ids is not None:
            kwargs["position_ids"] = positions_from_mask(mask)[:, -ids.size(1):]
        return args, kwargs

    hf.register_forward_pre_hook(fill_positions, with_kwargs=True)
    return hf


def load_weights(hf, state: dict):
    """Load `state` into a Hugging Face model, every weight accounted for; in eval mode."""
    missing, unexpected = hf.load_state_dict(state, strict=False)
    # GPT-2 may register non-parameter buffers (attention masks) that we do not have
    if unexpected or any(not k.endswith((".attn.bias", ".attn.masked_bias")) for k in missing):
        raise RuntimeError(f"export mismatch: missing {missing}, unexpected {unexpected}")
    return hf.eval()


def to_hf_reward_model(rm: RewardModel):
    """A `transformers.GPT2ForSequenceClassification` giving the same raw scores: HF reads the score at
    the rightmost token that is not padding, as `RewardModel` does, so the pad id must be <|pad|>
    (not EOS). The normalization (r - mean) / std is stored in the config as `reward_mean` and
    `reward_std`; HF's model returns the raw score (its head has no bias to fold the mean into)."""
    from transformers import GPT2ForSequenceClassification

    check_reward_model(rm)
    check_pad_id(rm.pad_token_id, rm.transformer.config.vocab_size)  # not EOS, even if set after construction
    config = hf_config(rm.transformer)
    config.num_labels, config.pad_token_id = 1, rm.pad_token_id
    config.reward_mean, config.reward_std = rm.reward_mean.item(), rm.reward_std.item()
    state = {k: v for k, v in hf_state_dict(rm.transformer).items() if k.startswith("transformer.")}
    return load_weights(GPT2ForSequenceClassification(config), {**state, "score.weight": rm.score.weight.detach()})


def to_hf_critic(trunk: GPT, head: ValueHead):
    """A `transformers.GPT2ForTokenClassification` (one label) giving the critic's values at every
    position: its output at position i is V of the state after tokens 0..i, so for a completion
    starting at position P, minirl's `completion_values[:, t]` (V before completion token t) is its
    output at P - 1 + t. A token classifier, not a sequence classifier, because the value head has
    a bias, which HF's sequence-classification head lacks."""
    from transformers import GPT2ForTokenClassification

    config = hf_config(trunk)
    config.num_labels = 1
    state = {k: v for k, v in hf_state_dict(trunk).items() if k.startswith("transformer.")}
    return load_weights(GPT2ForTokenClassification(config), {
        **state, "classifier.weight": head.v.weight.detach(), "classifier.bias": head.v.bias.detach()})


def to_hf_prm(prm: ProcessRewardModel):
    """A `transformers.GPT2ForTokenClassification` with two labels (wrong, right), the model TRL's
    process reward models were: its logits at each position are (0, z), z the PRM's logit, so its
    softmax gives the PRM's sigmoid(z) to 'right' and its cross-entropy on a 0/1 label is the PRM's
    binary one. Read it at the separators, as `minirl.lm.process_head` says."""
    from transformers import GPT2ForTokenClassification

    if not isinstance(prm, ProcessRewardModel):
        raise TypeError(f"prm must be a minirl ProcessRewardModel, got {type(prm).__name__}")
    config = hf_config(prm.transformer)
    config.num_labels = 2
    state = {k: v for k, v in hf_state_dict(prm.transformer).items() if k.startswith("transformer.")}
    w, b = prm.score.weight.detach(), prm.score.bias.detach()  # (1, C), (1,)
    head = {"classifier.weight": torch.cat([torch.zeros_like(w), w]), "classifier.bias": torch.cat([torch.zeros_like(b), b])}
    return load_weights(GPT2ForTokenClassification(config), {**state, **head})


def to_hf_tokenizer():
    """The course tokenizer as a `transformers.PreTrainedTokenizerFast` with the same ids, built offline
    from the shipped BPE ranks by transformers' tiktoken converter, handed the ranks directly (its
    own loader reads a tiktoken file or URL). <|endoftext|> is EOS and BOS, <|pad|> is PAD.

    Text that spells a special token stays text (split_special_tokens=True): tiktoken refuses such text
    unless told, and Hugging Face would by default map it to the special id, so a user could end a
    sequence by typing "<|endoftext|>". The result equals `load_tokenizer().encode(text,
    disallowed_special=())`.

    The course's models have no chat format; engines that always apply a chat template (verl) get
    `PLAIN_CHAT_TEMPLATE`, which returns the messages' text unchanged."""
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    class RanksConverter(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(ranks):  # the converter's loader, given the ranks themselves
            return ranks

    ranks, pattern = load_ranks()
    backend = RanksConverter(vocab_file=ranks, pattern=pattern, extra_special_tokens=list(SPECIAL_TOKENS)).converted()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=EOS, eos_token=EOS, pad_token=PAD,
                                        split_special_tokens=True)
    tokenizer.chat_template = PLAIN_CHAT_TEMPLATE
    return tokenizer


def save(folder, policy: GPT, reward_model: RewardModel | None = None,
         critic: tuple[GPT, ValueHead] | None = None) -> dict[str, Path]:
    """Write the policy with the tokenizer and its generation config to `folder`, and the reward model
    and critic (when given) to its subfolders `reward_model/` and `critic/`, each with the tokenizer,
    as `from_pretrained` reads them (safetensors). Returns the folder of each model.

        AutoModelForCausalLM.from_pretrained(folder); AutoTokenizer.from_pretrained(folder)
        AutoModelForSequenceClassification.from_pretrained(folder / "reward_model")
        AutoModelForTokenClassification.from_pretrained(folder / "critic")

    A folder that exists is written into (an earlier export's files replaced, others left alone); a
    path that is a file, where a folder goes, is refused (Hugging Face would log it and write nothing).
    """
    if not isinstance(policy, GPT):
        raise TypeError(f"policy must be a minirl GPT, e.g. minirl.load_model('sft'); got {type(policy).__name__}")
    if reward_model is not None:
        check_reward_model(reward_model, "reward_model")
    if critic is not None and not (isinstance(critic, (tuple, list)) and len(critic) == 2 and isinstance(critic[0], GPT)
                                   and isinstance(critic[1], ValueHead)):
        raise TypeError(f"critic must be a (trunk, head) pair: a minirl GPT and its ValueHead; got {type(critic).__name__}")
    folder = Path(folder)
    wanted = [folder] + [folder / name for name, given in (("reward_model", reward_model), ("critic", critic))
                         if given is not None]
    for path in wanted:
        if path.is_file():
            raise ValueError(f"{path} is a file: save writes a folder there (from_pretrained reads folders); pass the "
                             "path of a folder, new or existing")
    models = {"policy": (folder, to_hf_gpt2(policy))}
    if reward_model is not None:
        models["reward_model"] = (folder / "reward_model", to_hf_reward_model(reward_model))
    if critic is not None:
        models["critic"] = (folder / "critic", to_hf_critic(*critic))
    tokenizer = to_hf_tokenizer()
    for path, hf in models.values():
        hf.save_pretrained(path)
        tokenizer.save_pretrained(path)
    return {name: path for name, (path, _) in models.items()}
