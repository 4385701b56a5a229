"""``GET /metrics`` read with prometheus_client's parser (the exposition
format's own implementation, not a line split): one copy for the tests and
benches. prometheus_client is in the client's ``test`` extra and
scripts/pyenv's pins; vLLM's venv has it as a vLLM dependency."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of a Prometheus text exposition: (name, labels, value)."""
    from prometheus_client.parser import text_string_to_metric_families

    return [(s.name, dict(s.labels), float(s.value))
            for fam in text_string_to_metric_families(text) for s in fam.samples]


def scrape(url: str, timeout: float = 10) -> list[tuple[str, dict[str, str], float]]:
    """parse() of GET url/metrics."""
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout) as r:
        return parse(r.read().decode())


def value(samples: list[tuple[str, dict[str, str], float]], name: str, labels: Mapping[str, str] | None = None) -> float:
    """The sum of the samples called name whose labels include labels (0
    when there is none)."""
    want = dict(labels or {})
    return sum(v for n, ls, v in samples if n == name and all(ls.get(k) == x for k, x in want.items()))
