"""The day rotation that spreads make test's repeated items over days (tests/support/rotation.py)."""

from __future__ import annotations

from tests.support import rotation


def _days(monkeypatch, items, k, **kw) -> list:
    monkeypatch.setattr(rotation, "ROTATION", k)
    picks = []
    for day in range(2 * k):
        monkeypatch.setattr(rotation, "DAY", day)
        picks.append(rotation.todays(items, **kw))
    return picks


def test_every_item_runs_within_the_rotation_and_a_short_list_every_day(monkeypatch):
    picks = _days(monkeypatch, list("abcdefg"), 5)
    assert all(picks) and sorted(sum(picks[:5], [])) == list("abcdefg")
    short = _days(monkeypatch, ["x", "y"], 5)
    assert all(len(p) == 1 for p in short) and {p[0] for p in short[:5]} == {"x", "y"}


def test_a_short_list_not_needed_every_day_runs_on_as_many_days_as_it_has_items(monkeypatch):
    picks = _days(monkeypatch, ["x", "y"], 5, every_day=False)
    assert [p for p in picks[:5] if p] == [["x"], ["y"]]
    assert picks[5:] == picks[:5]  # the next five days the same again
    assert _days(monkeypatch, ["x", "y"], 1, every_day=False)[0] == ["x", "y"]  # make test-long: both


def test_every_test_runs_in_some_turn_of_n_consecutive_ones_and_only_in_one(monkeypatch):
    units = [f"tests/spark/test_{m}.py::test_{t}" for m in range(10) for t in range(20)]
    monkeypatch.setattr(rotation, "SHARE", 5)
    for start in (0, 7):
        taken = []
        for turn in range(start, start + 5):
            monkeypatch.setattr(rotation, "TURN", turn)
            taken.append([u for u in units if rotation.in_share(u)])
        assert sorted(sum(taken, [])) == sorted(units), "each unit in exactly one turn of five"
        assert all(25 <= len(t) <= 55 for t in taken), [len(t) for t in taken]  # about a fifth each
    monkeypatch.setattr(rotation, "SHARE", 1)
    assert all(rotation.in_share(u) for u in units)  # make test-long: every test


def test_what_takes_its_turn_together_and_what_runs_every_time():
    unit = rotation.share_unit
    assert unit("tests/unit/test_x.py", None, "test_a", False, False) is None  # an EVERY_RUN folder
    assert unit("tests/spark/test_x.py", None, "test_a", True, False) is None  # marked every_run
    assert unit("tests/dbt/test_f.py", "Cls", "test_a", False, True) == "tests/dbt/test_f.py"  # the module
    assert unit("tests/spark/test_x.py", "Cls", "test_a", False, False) == "tests/spark/test_x.py::Cls"
    assert unit("tests/spark/test_x.py", None, "test_a[p1]", False, False) == "tests/spark/test_x.py::test_a[p1]"


def test_a_run_keeps_every_runs_tests_and_its_turns_share_of_the_others(monkeypatch):
    every = [("every", None)]
    items = every + [(f"t{i}", f"tests/spark/test_{i}.py::test_a") for i in range(50)]
    monkeypatch.setattr(rotation, "SHARE", 5)
    kept_by_turn = []
    for turn in range(5):
        monkeypatch.setattr(rotation, "TURN", turn)
        kept, left = rotation.split(items, lambda item: item[1])
        assert every[0] in kept and sorted(kept + left) == sorted(items)
        kept_by_turn.append([i for i in kept if i[1] is not None])
    assert sorted(sum(kept_by_turn, [])) == sorted(items[1:])  # each other test in one turn of five
    monkeypatch.setattr(rotation, "SHARE", 1)
    assert rotation.split(items, lambda item: item[1]) == (items, [])  # make test-long: everything
