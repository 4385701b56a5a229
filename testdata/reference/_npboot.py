"""Bootstrap for the draftd numpy reference scripts: make sure numpy is importable.

The machine's `python3` may be a pyenv build without numpy while the Debian package
python3-numpy lives under /usr/bin/python3. If numpy is missing, re-exec the current
script once under /usr/bin/python3. Not a general launcher; nothing else lives here.
"""
import os
import sys

DEBIAN_PYTHON = "/usr/bin/python3"
_GUARD = "DRAFTD_REFERENCE_REEXEC"


def ensure_numpy():
    try:
        import numpy  # noqa: F401
        return
    except ImportError:
        pass
    here = os.path.realpath(sys.executable or "")
    if (not os.environ.get(_GUARD) and os.path.exists(DEBIAN_PYTHON)
            and here != os.path.realpath(DEBIAN_PYTHON)):
        os.environ[_GUARD] = "1"
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON] + sys.argv)
    sys.exit("numpy is not importable by %s; install the Debian package "
             "(apt-get install -y python3-numpy) and run with %s"
             % (sys.executable, DEBIAN_PYTHON))
