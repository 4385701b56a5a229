"""The strictness switch (draftd._testing): how DRAFTD_STRICT and CI read,
and that under it pytest reports every kind of skip as a failure, checked by
running pytest on small test files in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from draftd._testing import strict

SKIPS = {
    "test_own.py": "import pytest\n\ndef test_a():\n    pytest.skip('no model')\n",
    "test_fixture.py": "import pytest\n\n@pytest.fixture\ndef f():\n    pytest.skip('no file')\n\ndef test_b(f):\n    pass\n",
    "test_module.py": "import pytest\n\npytest.importorskip('no_such_module_draftd')\n\ndef test_c():\n    pass\n",
    "test_mark.py": "import pytest\n\n@pytest.mark.skip(reason='marked')\ndef test_d():\n    pass\n",
    "test_pass.py": "def test_e():\n    pass\n",
    "test_xfail.py": "import pytest\n\n@pytest.mark.xfail(reason='known', strict=True)\ndef test_f():\n    assert False\n",
}


@pytest.mark.parametrize(("strict_var", "ci", "want"), [
    ("", "", False), ("1", "", True), ("0", "", False), ("0", "true", False), ("", "true", True),
    ("", "1", True), ("", "false", False), ("", "0", False),
])
def test_strict_reads_the_switch(monkeypatch: pytest.MonkeyPatch, strict_var: str, ci: str, want: bool) -> None:
    monkeypatch.setenv("DRAFTD_STRICT", strict_var)
    monkeypatch.setenv("CI", ci)
    assert strict() is want


def test_strict_rejects_other_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DRAFTD_STRICT", "yes")
    with pytest.raises(ValueError, match="DRAFTD_STRICT='yes'"):
        strict()


def run(tmp_path: Path, strict_var: str, *names: str) -> tuple[int, str]:
    for name in names or SKIPS:
        (tmp_path / name).write_text(SKIPS[name])
    (tmp_path / "conftest.py").write_text("from draftd._testing.pytest_strict import *  # noqa: F401,F403\n")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "DRAFTD_STRICT", "PYTEST_ADDOPTS")}
    env["DRAFTD_STRICT"] = strict_var
    # the draftd package this test imports, wherever it is
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(Path(strict.__code__.co_filename).parents[2]),
                                                    env.get("PYTHONPATH", "")) if p)
    p = subprocess.run([sys.executable, "-m", "pytest", "-ra", "-p", "no:cacheprovider", "-q", str(tmp_path)],
                       cwd=tmp_path, env=env, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def test_every_skip_fails_under_the_switch(tmp_path: Path) -> None:
    rc, out = run(tmp_path, "1", *(n for n in SKIPS if n != "test_module.py"))
    assert rc == 1, out
    for what in ("no model", "no file", "marked"):
        assert f"skipped under the strictness switch (DRAFTD_STRICT=1), a failure: {what}" in out, \
            f"{what!r} not reported as a failure:\n{out}"
    last = out.splitlines()[-1]
    # a skip in a test's setup (a fixture's, a mark's) fails as an error
    assert "skipped" not in last and "1 failed" in last and "2 errors" in last and "1 passed" in last \
        and "1 xfailed" in last, out


def test_a_module_skip_fails_collection_under_the_switch(tmp_path: Path) -> None:
    rc, out = run(tmp_path, "1", "test_module.py")
    assert rc != 0 and "skipped under the strictness switch" in out and "no_such_module_draftd" in out, out


def test_skips_are_skips_without_the_switch(tmp_path: Path) -> None:
    rc, out = run(tmp_path, "0")
    assert rc == 0, out
    last = out.splitlines()[-1]
    assert "1 passed" in last and "4 skipped" in last and "1 xfailed" in last, out
