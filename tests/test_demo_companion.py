"""The demo's choice between the browser companion and ``yimi approve`` (fast: no browser
is started)."""

from __future__ import annotations

from demo.companion import CHROMIUM, Missing, missing
from demo.narrated import cli_approval


def test_both_there_means_the_browser() -> None:
    assert missing(lambda name: object(), lambda path: True) is None


def test_a_missing_playwright_or_chromium_is_named() -> None:
    assert missing(lambda name: None, lambda path: True) == Missing("the playwright package")
    assert missing(lambda name: object(), lambda path: False) == Missing(
        f"Debian's chromium ({CHROMIUM})"
    )
    both = missing(lambda name: None, lambda path: path != CHROMIUM)
    assert both == Missing(f"the playwright package and Debian's chromium ({CHROMIUM})")


def test_it_looks_for_the_playwright_package_and_debians_chromium() -> None:
    asked: list[str] = []

    def find_spec(name: str) -> object:
        asked.append(name)
        return object()

    def exists(path: str) -> bool:
        asked.append(path)
        return True

    assert missing(find_spec, exists) is None
    assert asked == ["playwright", "/usr/bin/chromium"]


def test_the_fallback_says_why_and_how_to_get_the_browser_in_one_line() -> None:
    line = cli_approval("c-1", Missing("the playwright package"))
    assert line == (
        "approves card c-1 on the phone (yimi approve): the phone companion (browser) needs "
        "the playwright package, not installed here; scripts/setup installs it"
    )
    assert "\n" not in line
