"""pytest hooks of the strictness switch (draftd._testing.strict): under it
every skip, whether a test's own, a fixture's, ``importorskip`` at import
time or a whole module's, is reported as a failure naming what was
skipped. A conftest.py enables them with

    from draftd._testing.pytest_strict import *  # noqa: F401,F403

(pytest reads hooks from a conftest module's names). Run pytest with -ra so
that any skip outside the switch is listed in the summary."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from draftd._testing import describe, strict

__all__ = ["pytest_configure", "pytest_make_collect_report", "pytest_report_header", "pytest_runtest_makereport"]

# The switch as it was when the session started (a test that sets the
# variables, as test_strict.py does, changes nothing here).
_on: bool | None = None
_why = ""


def pytest_configure(config: pytest.Config) -> None:
    global _on, _why
    try:
        _on = strict()
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    _why = describe()


def _fail_skip(report: Any) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = f"skipped under the strictness switch ({_why}), a failure: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    if _on:
        _fail_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, Any, None]:
    outcome = yield
    if _on:
        _fail_skip(outcome.get_result())


def pytest_report_header(config: pytest.Config) -> str:
    return f"draftd strictness switch ({_why}): {'on, a skip is a failure' if _on else 'off'}"
