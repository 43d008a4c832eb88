"""Export to Hugging Face's GPT-2 (`transformers.GPT2LMHeadModel`), for students moving on to TRL.

Our layout is GPT-2's, so the export is a rename plus a transpose: GPT-2 stores its linear
layers as Conv1D with weights (in, out), where `nn.Linear` keeps (out, in). The activation must
be GPT-2's tanh approximation ("gelu_new"), dropout off, and LayerNorm eps 1e-5.
"""
from __future__ import annotations

from .model import GPT

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def hf_state_dict(model: GPT) -> dict:
    """Our state dict under GPT-2's names, with Conv1D weights transposed."""
    out = {}
    for name, tensor in model.state_dict().items():
        out[f"transformer.{name}"] = tensor.t().contiguous() if name.endswith(CONV1D) else tensor
    out["lm_head.weight"] = model.wte.weight.detach()  # tied
    return out


def to_hf_gpt2(model: GPT):
    """A `transformers.GPT2LMHeadModel` with the same weights (and so the same logits)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    c = model.config
    config = GPT2Config(
        vocab_size=c.vocab_size, n_positions=c.n_ctx, n_embd=c.n_embd, n_layer=c.n_layer, n_head=c.n_head,
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        layer_norm_epsilon=1e-5, tie_word_embeddings=True,
    )
    hf = GPT2LMHeadModel(config)
    missing, unexpected = hf.load_state_dict(hf_state_dict(model), strict=False)
    # GPT-2 may register non-parameter buffers (attention masks) that we do not have
    if unexpected or any(not k.endswith((".attn.bias", ".attn.masked_bias")) for k in missing):
        raise RuntimeError(f"export mismatch: missing {missing}, unexpected {unexpected}")
    return hf.eval()
