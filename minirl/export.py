"""Export to Hugging Face, for students moving on to TRL: the policy as `GPT2LMHeadModel`, a reward
model as `GPT2ForSequenceClassification`, the tokenizer as a fast tokenizer.

Our layout is GPT-2's, so the model export is a rename plus a transpose: GPT-2 stores its linear
layers as Conv1D with weights (in, out), where `nn.Linear` keeps (out, in). The activation must
be GPT-2's tanh approximation ("gelu_new"), dropout off, and LayerNorm eps 1e-5.
"""
from __future__ import annotations

from .model import GPT
from .reward_model import RewardModel
from .tokenizer import EOS, PAD, SPECIAL_TOKENS, load_ranks

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def hf_state_dict(model: GPT) -> dict:
    """Our state dict under GPT-2's names, with Conv1D weights transposed."""
    out = {}
    for name, tensor in model.state_dict().items():
        out[f"transformer.{name}"] = tensor.t().contiguous() if name.endswith(CONV1D) else tensor
    out["lm_head.weight"] = model.wte.weight.detach()  # tied
    return out


def hf_config(model: GPT):
    """The `transformers.GPT2Config` of our model's shape and numerics."""
    from transformers import GPT2Config

    c = model.config
    return GPT2Config(
        vocab_size=c.vocab_size, n_positions=c.n_ctx, n_embd=c.n_embd, n_layer=c.n_layer, n_head=c.n_head,
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        layer_norm_epsilon=1e-5, tie_word_embeddings=True,
    )


def to_hf_gpt2(model: GPT):
    """A `transformers.GPT2LMHeadModel` with the same weights (and so the same logits)."""
    from transformers import GPT2LMHeadModel

    return load_weights(GPT2LMHeadModel(hf_config(model)), hf_state_dict(model))


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

    config = hf_config(rm.transformer)
    config.num_labels, config.pad_token_id = 1, rm.pad_token_id
    config.reward_mean, config.reward_std = rm.reward_mean.item(), rm.reward_std.item()
    state = {k: v for k, v in hf_state_dict(rm.transformer).items() if k.startswith("transformer.")}
    return load_weights(GPT2ForSequenceClassification(config), {**state, "score.weight": rm.score.weight.detach()})


def to_hf_tokenizer():
    """The course tokenizer as a `transformers.PreTrainedTokenizerFast` with the same ids, built offline
    from the shipped BPE ranks by transformers' tiktoken converter, handed the ranks directly (its
    own loader reads a tiktoken file or URL). <|endoftext|> is EOS and BOS, <|pad|> is PAD.

    Text that spells a special token stays text (split_special_tokens=True): tiktoken refuses such text
    unless told, and Hugging Face would by default map it to the special id, so a user could end a
    sequence by typing "<|endoftext|>". The result equals `load_tokenizer().encode(text,
    disallowed_special=())`."""
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    class RanksConverter(TikTokenConverter):
        @staticmethod
        def load_tiktoken_bpe(ranks):  # the converter's loader, given the ranks themselves
            return ranks

    ranks, pattern = load_ranks()
    backend = RanksConverter(vocab_file=ranks, pattern=pattern, extra_special_tokens=list(SPECIAL_TOKENS)).converted()
    return PreTrainedTokenizerFast(tokenizer_object=backend, bos_token=EOS, eos_token=EOS, pad_token=PAD,
                                   split_special_tokens=True)
