"""`bench.quality_metrics.label_ceiling`: what labelled pairs allow any hit rule at a given FPR."""

from __future__ import annotations

import numpy as np
import pytest

from bench.quality_metrics import label_ceiling


def test_label_ceiling_counts_noise_and_the_guards_best_case() -> None:
    texts = [
        ("What is life?", "what is  life"),  # identical once case and punctuation go
        ("What is life?", "What is life ?"),  # identical, but labelled non-duplicate
        ("a", "b"),
        ("c", "d"),
        ("e", "f"),
    ]
    scores = np.array([1.0, 0.995, 0.97, 0.95, 0.94], dtype=np.float32)
    labels = np.array([1, 0, 0, 1, 1])
    # The guards block the non-duplicate at 0.97, and wrongly the duplicate at 0.95.
    allowed = np.array([True, True, False, False, True])

    ceiling = label_ceiling(texts, scores, labels, allowed, max_fpr=0.5)

    assert ceiling["identical"] == {"pairs": 2, "duplicates": 1, "share": 0.5}
    assert ceiling["near_identical"]["pairs"] == 2
    # One wrong hit is allowed (half of two non-duplicates). Bare cosine must stay above 0.97:
    # one duplicate of three. Twice that, within the same one wrong hit: 2 of 3 at P ≥ 2/3.
    assert ceiling["needed_recall"] == pytest.approx(2 / 3)
    assert ceiling["needed_precision"] == pytest.approx(2 / 3)
    # Guards that kept their block but never blocked a duplicate reach every duplicate.
    best = ceiling["never_block_duplicates"]
    assert (best["recall"], best["wrong"]) == (1.0, 1)
