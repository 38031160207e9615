"""benchmarks/results_table.py's slice profile: where along the stack a carried label is right."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from results_table import PROFILE_BINS, profile_table, slice_profile, table  # noqa: E402


def _stack(z: int = 7, size: int = 40) -> np.ndarray:
    """RV (1) beside LV (3) on slices 0-4, widest at slice 0 (the base), nothing on slices 5-6."""
    rows, cols = np.mgrid[:size, :size]
    out = np.zeros((z, size, size), np.int16)
    for k in range(5):
        r = 9 - k
        out[k][(rows - 20) ** 2 + (cols - 12) ** 2 <= r * r] = 1
        out[k][(rows - 20) ** 2 + (cols - 28) ** 2 <= r * r] = 3
    return out


def test_the_profile_counts_by_slice_from_the_base_in_either_stack_order():
    target = _stack()
    carried = target.copy()
    carried[0][carried[0] == 1] = 0  # the RV missed on the base slice only
    prof = slice_profile(carried, target, target)
    n = [int((target[k] == 1).sum()) for k in range(7)]
    assert prof["rv"][0] == [0, n[0], 0]
    assert prof["rv"][1] == [n[1], n[1], n[1]] and prof["rv"][2] == [n[2], n[2], n[2]]
    assert prof["rv"][3] == [sum(n[3:])] * 3  # the rest, slices 3-6 together
    assert prof["lv"][0][0] == prof["lv"][0][1] == prof["lv"][0][2] > 0 and prof["myo"] == [[0, 0, 0]] * len(PROFILE_BINS)
    flipped = slice_profile(carried[::-1], target[::-1], target[::-1])  # apex first: the base found at the other end
    assert flipped == prof


def test_the_profile_table_pools_the_pairs():
    target = _stack()
    carried = target.copy()
    carried[0][carried[0] == 1] = 0
    rows = [{"direction": "ED->ES", "profile": {"npc": slice_profile(carried, target, target)}},
            {"direction": "ED->ES", "profile": {"npc": slice_profile(target, target, target)}}]
    line = [x for x in profile_table(rows, ["npc"]) if x.startswith("| `npc` | ED->ES")][0]
    base, nxt = line.split(" | ")[2:4]
    assert base.split(" / ") == ["0.667", "-", "1.000"] and nxt.split(" / ") == ["1.000", "-", "1.000"]  # no Myo: "-"
    assert profile_table([{"direction": "ED->ES"}], ["npc"]) == []  # rows from before the profile


def test_pairs_above_demons_count_only_against_a_demons_row_of_the_same_run():
    rows = [{"patient": "p1", "group": "NOR", "direction": "ES->ED", "dice": {"demons": [0.8] * 3, "npc-images": [0.9] * 3},
             "seconds": {"demons": 10.0, "npc-images": 2.0}},
            {"patient": "p2", "group": "DCM", "direction": "ES->ED", "dice": {"demons": [0.9] * 3, "npc-images": [0.85] * 3},
             "seconds": {"demons": 10.0, "npc-images": 3.0}}]
    line = [ln for ln in table(rows, ["demons", "npc-images"]).splitlines() if ln.startswith("| `npc-images`")][0]
    assert line.endswith("| 0.850 | 0.900 | 0.875 | 1 / 2 | 2.5 |"), line  # DCM, NOR, all
    alone = [dict(r, dice={"npc-images": r["dice"]["npc-images"]}) for r in rows]  # a run of the NPC row only
    line = [ln for ln in table(alone, ["npc-images"]).splitlines() if ln.startswith("| `npc-images`")][0]
    assert line.endswith("| 0.875 | - | 2.5 |"), line
