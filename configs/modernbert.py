"""Corpus: the King James Bible (English; WordPiece tokenizer).

ModernBERT (Warner et al. 2024): pre-LN without biases, GeGLU MLP, RoPE with the half-split
pairing (theta 160,000 on global layers), layer 0 reading the embedding norm directly, a final
norm, no token types, no dropout. English (King James Bible, WordPiece).

Variants:
  ''      CPU default: 3 layers x 128, 4 heads, GeGLU 192, seq_len 128, 800 steps (minutes)
  'tiny'  tests: 3 layers x 32
  'base'  the published ModernBERT-base shapes: 22 layers x 768, 12 heads, GeGLU 1152, 8192
          positions, trained at 1024 tokens; global attention every 3rd layer from layer 0,
          local layers a 128-token window with RoPE theta 10,000 (see the block below)
"""

from posjax.config import defaults


def get_config(arg=None):
    variant = defaults.parse_variant(arg)
    config = defaults.get_config(variant)
    defaults.english(config, variant)
    m = config.model
    m.post_ln = False  # pre-LN, with the final norm posjax adds to every pre-LN stack
    m.mlp = "glu"
    m.activation = "gelu"  # GeGLU: gelu(x W_in) * (x W_gate)
    m.head_activation = "gelu"
    m.norm_bias = m.attention_bias = m.mlp_bias = m.head_bias = False
    m.first_attention_norm = False
    m.type_vocab_size = 0
    m.layer_norm_eps = 1e-5
    m.dropout = 0.0
    config.position = defaults.position("rope", interleaved=False, base=160000.0)
    # ModernBERT's GLU width is 1.5x hidden (1152 / 768).
    if variant == "":
        m.num_layers, m.mlp_dim = 3, 192
        window = 64
    elif variant == "tiny":
        m.num_layers, m.mlp_dim = 3, 48
        window = 16
    else:
        m.hidden, m.num_layers, m.num_heads, m.mlp_dim = 768, 22, 12, 1152
        m.max_length = 8192
        config.data.seq_len = 1024  # ModernBERT's pretraining length before its 8k extension
        config.data.vocab_size = 50368  # its BPE vocabulary's size (the model's comes from ours)
        window = 128
    # Local / global layers as ModernBERT: a sliding window of `window` tokens
    # (|i - j| <= window // 2) on every layer but 0, 3, 6, ..., which attend globally; the
    # local layers' RoPE base is 10,000 against the global layers' 160,000.
    m.local_window = window
    m.global_every, m.global_first = 3, True
    m.local_position = {"base": 10000.0}
    return config
