"""The served tests' OpenAI-compatible client lives in
draftd._testing.openai_stream (the benches use it too); this name stays for
the tests that import it from here."""

from draftd._testing.openai_stream import Stream, complete, metric, metrics, run_all

__all__ = ["Stream", "complete", "metric", "metrics", "run_all"]
