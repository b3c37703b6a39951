"""CI runs every test: the Makefile's tiers (main, browser, slow, images) split the markers so
that each test, whatever its markers, is in exactly one tier, and .ci/run runs every tier."""

from __future__ import annotations

import itertools
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

from _pytest.mark.expression import Expression

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = (ROOT / "Makefile").read_text()
TIER_TARGETS = ("test-main", "test-browser", "test-slow", "test-images")


def has(marked: tuple[str, ...]) -> Callable[..., bool]:
    """The matcher of a test carrying the markers `marked`."""
    return lambda name, **_: name in marked


def markers() -> list[str]:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    return [line.split(":")[0] for line in declared["markers"]]


def variable(name: str) -> str:
    found = re.search(rf"^{name} := (.+)$", MAKEFILE, re.MULTILINE)
    assert found, f"{name} is not set in the Makefile"
    return found.group(1)


def selection(target: str) -> str:
    """The marker expression `make <target>` passes to pytest."""
    recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", MAKEFILE, re.MULTILINE)
    assert recipe, f"no `{target}` target in the Makefile"
    tier = re.search(r"\$\(call tier,\$\((\w+)\)", recipe.group(1))
    if tier:
        return variable(tier.group(1))
    plain = re.search(r'pytest -m "?([\w ()]+?)"? ', recipe.group(1))
    assert plain, f"`{target}` selects no marker expression"
    return plain.group(1)


def test_every_combination_of_markers_is_in_exactly_one_tier() -> None:
    names = markers()
    assert {"slow", "browser", "e2e", "images"} <= set(names)
    tiers = {target: Expression.compile(selection(target)) for target in TIER_TARGETS}
    for size in range(len(names) + 1):
        for marked in itertools.combinations(names, size):
            chosen = [t for t, e in tiers.items() if e.evaluate(has(marked))]
            assert len(chosen) == 1, (marked, chosen)


def test_make_test_leaves_out_the_slow_tests_and_ci_runs_them() -> None:
    assert re.search(r"^test: .*\n\t.* test-main test-browser$", MAKEFILE, re.MULTILINE)
    slow = Expression.compile(selection("test-slow"))
    assert slow.evaluate(has(("slow",)))
    for target in ("test-main", "test-browser"):
        quick = Expression.compile(selection(target))
        for marked in (("slow",), ("slow", "browser"), ("slow", "e2e"), ("slow", "k8s")):
            assert not quick.evaluate(has(marked)), (target, marked)
    ran = re.findall(r"^tier [\w-]+ make ([\w-]+)$", (ROOT / ".ci" / "run").read_text(), re.M)
    assert set(TIER_TARGETS) <= set(ran), ran
