import sys
from pathlib import Path

from draftd._testing.pytest_strict import *  # noqa: F401,F403  (the strictness switch's hooks)

sys.path.insert(0, str(Path(__file__).parent))
