"""Hugging Face BERT-family checkpoints -> posjax (config, params, vocabulary, workdir).

    python -m posjax.convert --hf path/to/hf_model --out workdirs/minilm
    python -m posjax.convert --hf path/to/hf_model --out workdirs/minilm_8k --extend 8192
    python -m posjax.convert --to_hf workdirs/minilm_8k --out hf/minilm_8k    # and back

Supported: BERT, RoBERTa (learned absolute), ALBERT (factorized + shared layer), RoFormer
(interleaved RoPE), NEZHA (transformers 4.x layout), DeBERTa-v2/v3 (relative_attention, no
absolute positions, no conv layer), ModernBERT (pre-LN, GeGLU, half-split RoPE), NomicBERT (post-LN, SwiGLU, half-split RoPE). The Python API is posjax.pretrained (load / encode /
mlm_logits / extend / save). posjax/convert/to_hf writes BERT, RoBERTa, RoFormer and
ModernBERT models back as Hugging Face folders.
"""

from posjax.convert.core import Converted, convert_hf
from posjax.convert.hf_config import SUPPORTED

__all__ = ["Converted", "SUPPORTED", "convert_hf"]
