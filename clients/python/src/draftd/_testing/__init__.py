"""draftd's own test and bench support: not part of the client's API.

One copy of each rule the test suite and the benches share, importable
wherever the ``draftd`` package is (the tests, clients/python/bench,
testdata/realmodels) without putting test files on ``sys.path``:

- this module: the strictness switch (``strict``, ``need``), read as
  internal/testenv reads it in Go and scripts/realtau in bash;
- ``pytest_strict``: the pytest hooks that turn every skip into a failure
  under the switch (conftest.py files import them);
- ``neartie``: when an assisted output may differ from plain greedy;
- ``serve``: building draftd and starting ``draftd serve``;
- ``metrics``: reading ``GET /metrics`` with prometheus_client's parser.

It is private (the leading underscore): it changes with the tests, without
notice, and imports nothing outside the standard library at import time.
"""

from __future__ import annotations

import os

#: The switch's environment variable (docs/development.md#strictness).
VAR = "DRAFTD_STRICT"


def strict() -> bool:
    """DRAFTD_STRICT=1 is strict, 0 is not; unset or empty, the suite is
    strict when CI is set to anything but "", "0" or "false". Any other
    DRAFTD_STRICT value raises ValueError naming it."""
    v = os.environ.get(VAR, "")
    if v == "1":
        return True
    if v == "0":
        return False
    if v == "":
        return os.environ.get("CI", "") not in ("", "0", "false")
    raise ValueError(f"{VAR}={v!r}: want 1 (missing prerequisites fail), 0 (they skip) or unset")


def describe() -> str:
    """Which variable made the suite strict, for messages."""
    v = os.environ.get(VAR, "")
    return f"{VAR}={v}" if v else f"CI={os.environ.get('CI', '')}"


def need(ok: bool, msg: str) -> None:
    """Skips the calling test with msg when not ok, or fails it under the
    switch. (pytest_strict fails any skip under the switch too; this says
    why in the test's own words.)"""
    if ok:
        return
    import pytest

    if strict():
        pytest.fail(f"{msg} ({describe()}: a missing prerequisite is a failure)")
    pytest.skip(msg)
