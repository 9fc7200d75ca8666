"""The words of results.md that depend on what a run reads.

Text runs score one held-out token stream per run, cut into rows of each length: every length
scores the same masked tokens, only the context differs. Image runs (data.corpus='patches',
posjax.data.patches) differ on each count: a length L is a grid of g x g patches (L = g * g),
one image per row, and every grid has its own held-out images, so a larger grid scores other
images of the same distribution, not the same patches in a longer context; intervals resample
images. results.json records each run's config, which says which kind a run is.
"""

from __future__ import annotations

import math

from posjax import schema
from posjax.evaluation.stats import intervals

IMAGE_CORPUS = "patches"


def is_image_run(results: dict, run_key: str) -> bool:
    """Whether the run `run_key` ('<workdir>@<step>') of `results` reads image patches: its
    data.corpus, or the evaluator's --corpus when that replaced it."""
    corpus = results["settings"].get("corpus")
    if not corpus:
        # as the run's config.json gave it
        corpus = schema.given(results["runs"][run_key]["config"], "data.corpus")
    return corpus == IMAGE_CORPUS


def length_name(length: int, image: bool) -> str:
    """'64' for text; '8 x 8' for an image run (a length that is no square stays a number)."""
    g = math.isqrt(length) if image and length > 0 else 0
    return f"{g} x {g}" if g and g * g == length else str(length)


def intro(results: dict, kinds: set) -> list[str]:
    """The opening paragraphs of results.md for the run kinds present ({'text', 'image'})."""
    s = results["settings"]
    both = kinds == {"text", "image"}
    lines = []
    if "text" in kinds or not kinds:
        lines += [("Text runs: one" if both else "One") +
                  f" held-out stream per run with one fixed set of masked tokens (about "
                  f"{s.get('masked_tokens')} asked for, fewer when the held-out split is "
                  f"smaller: see 'scored tokens' per run; seed {s.get('seed')}); every length "
                  "and method scores exactly these tokens, only the context differs. Numbers: "
                  "estimate [95% interval], the mean over a group's training seeds; each "
                  "table names its interval method (a bootstrap over the rows' documents "
                  f"with at least {intervals.MIN_CLUSTERS} of them, else a cluster jackknife "
                  "with t quantiles; with several seeds the seeds are resampled too, or "
                  "their variance is added to the jackknife's, or a t interval over seed "
                  "means when that is wider)."
                  + ("" if both else " `n/a` = not applicable "
                                                      "(see results.json)."), ""]
    if "image" in kinds:
        lines += [f"Image runs (data.corpus='{IMAGE_CORPUS}'): a length is a grid of g x g "
                  "patches (64 = 8 x 8, 256 = 16 x 16), one image per row, read as (row, "
                  "column) positions by 2-D schemes and as raster positions r * g + c by 1-D "
                  "ones. Each grid has its own held-out images, drawn from the same "
                  f"distribution, with about {s.get('masked_tokens')} masked patches in all "
                  f"(at least one image; masks fixed by seed {s.get('seed')}): every method at "
                  "one grid scores exactly these patches, but a larger grid scores other "
                  "images, not the same patches in a longer context. 'shuffled' permutes the "
                  "patches' positions within each image. Numbers: estimate [95% "
                  "interval over images]. `n/a` = not applicable (see results.json).", ""]
    return lines


def mixed_title(results: dict) -> str:
    """' (mixed corpora: ...)' when eval.py --allow_mixed_corpora put runs trained on
    different corpora or tokenizers into one table; else ''."""
    mixed = results["settings"].get("mixed_corpora")
    return f" (mixed corpora: {'; '.join(mixed)})" if mixed else ""


def trained_at(length: int, image: bool) -> str:
    return f"{length_name(length, True)} = {length} patches" if image else str(length)


def rows_line(cells_ok: dict, lengths: list, image: bool) -> str:
    """Per run: the rows and scored tokens of each length (`cells_ok`: length -> ok cell)."""
    there = [n for n in lengths if n in cells_ok]
    if image:  # a row is one image; the scored patches differ by grid (different images)
        return ("images per grid: " + ", ".join(
            f"{length_name(n, True)}: {cells_ok[n]['overall']['rows']}" for n in there) +
            "; scored patches per grid: " + ", ".join(
            f"{length_name(n, True)}: {cells_ok[n]['overall']['count']}" for n in there))
    return ("rows per length (rows crossing a document boundary): " + ", ".join(
        f"{n}: {cells_ok[n]['overall']['rows']} ({cells_ok[n]['crossing_rows']})"
        for n in there) + "; scored tokens per length: " + ", ".join(
        sorted({str(c["overall"]["count"]) for c in cells_ok.values()})))
