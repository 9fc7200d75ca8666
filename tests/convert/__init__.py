"""Tests of posjax.convert and posjax.pretrained (Hugging Face parity, MiniLM, workdirs)."""
