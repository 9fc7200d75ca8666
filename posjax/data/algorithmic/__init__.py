"""Algorithmic length-generalization tasks (Delétang et al. 2023; Ruoss et al. 2023), pure numpy.

    task = algorithmic.get("binary_addition")
    s = task.sample(np.random.default_rng(0), batch=128, length=40)
    s.inputs    # [128, 40] int32 in [0, task.input_size)
    s.outputs   # [128, task.output_length(40)] int32 in [0, task.output_size)
    s.mask      # [128, task.output_length(40)] bool: the places the accuracy counts

One registered instance per task (an open set: `register` another instance, with its own name,
for a variant such as a larger alphabet). Every task follows the reference code of
google-deepmind/randomized_positional_encodings; each module's docstring says how, and where
the reference's own docstrings disagree with its code. A seed gives the same batch on every
machine (numpy's Generator). Besides the interface, each task has `solve(inputs) -> (outputs,
mask)`, `input_length(length)` (the tape's columns: modular_arithmetic makes an even length odd)
and `output_rule` / `input_rule` (words for listings). How the reference turns a sample into
a loss, an accuracy and a model input is in base.py's docstring (`masked_accuracy`,
`empty_target_tape`).

Levels (the papers' Chomsky classes): regular (parity_check, even_pairs, cycle_navigation,
modular_arithmetic), dcf (reverse_string, stack_manipulation, modular_arithmetic_brackets,
solve_equation), cs (duplicate_string, missing_duplicate_string, odds_first, bucket_sort,
binary_addition, binary_multiplication, compute_sqrt).
"""

from posjax.data.algorithmic import binary, brackets, cs, dcf, regular  # noqa: F401 (registers)
from posjax.data.algorithmic.base import (LEVELS, AlgorithmicTask, Sample, Task,
                                          empty_target_tape, get, masked_accuracy, names,
                                          register)

__all__ = ["LEVELS", "AlgorithmicTask", "Sample", "Task", "empty_target_tape", "get",
           "masked_accuracy", "names", "register"]
