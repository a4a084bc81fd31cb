"""The TPC-H benchmark judges `auto` on the refreshes after each model's first two, counted over
both change mixes in the order they ran (pure report code, fed the run records it keeps)."""

from __future__ import annotations

from types import SimpleNamespace

from benchmarks.run_tpch_dbt import _after_learning


def _run(seconds: dict, mode: str = "differential") -> SimpleNamespace:
    return SimpleNamespace(models={name: SimpleNamespace(seconds=s, mode=mode) for name, s in seconds.items()})


def _cycle(diff: float, full: float, mode: str = "differential") -> tuple:
    return (_run({"q01": diff}, mode), _run({"q01_full": full}, "full"), {}, None)


def test_only_refreshes_after_the_first_two_count():
    # rf ran first in each cycle: refreshes 1 (rf) and 2 (scattered) are where auto learns.
    records = {
        "rf": [_cycle(9.0, 3.0), _cycle(3.1, 3.0)],
        "scattered": [_cycle(9.0, 3.0), _cycle(2.0, 3.0)],
    }
    rf = " ".join(_after_learning({"q01": None}, records, "rf"))
    scattered = " ".join(_after_learning({"q01": None}, records, "scattered"))
    assert "1 of 1 models" in rf and "slower:" not in rf
    assert "1 of 1 models" in scattered and "slower:" not in scattered


def test_a_model_over_the_bound_is_named_with_its_ratio():
    records = {"rf": [_cycle(1.0, 3.0), _cycle(1.0, 3.0), _cycle(4.5, 3.0)]}
    text = " ".join(_after_learning({"q01": None}, records, "rf"))
    assert "0 of 1 models" in text and "q01 1.50" in text and "in full" not in text
    # A model `auto` sent to full compares a rebuild with a rebuild: the list says so.
    records = {"rf": [_cycle(1.0, 3.0), _cycle(1.0, 3.0), _cycle(3.6, 3.0, mode="full")]}
    assert "q01 1.20 (in full)" in " ".join(_after_learning({"q01": None}, records, "rf"))


def test_too_few_cycles_say_so_instead_of_judging():
    records = {"rf": [_cycle(9.0, 3.0)], "scattered": [_cycle(9.0, 3.0)]}
    text = " ".join(_after_learning({"q01": None}, records, "scattered"))
    assert "run more cycles" in text
