"""The server's Prometheus metrics, served at GET /metrics in the text format (prometheus-client).

Each app has a registry of its own (two apps in one process count apart). Routes are labelled by their
template, and any path the app does not serve as "other", so that no client can grow the label set.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    """Requests by route and status, their latency; per model: batch sizes, queue depth, sentences and tokens."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self):
        self.routes: set[str] = set()  # the app's route paths (build_app sets them): the only path labels
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "aiayn_http_requests",
            "HTTP requests answered, by route, method and status",
            ["route", "method", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "aiayn_http_request_duration_seconds",
            "Time from a request's arrival to the end of its answer, by route",
            ["route"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.batch_lines = Histogram(
            "aiayn_batch_lines",
            "Lines in each model batch, by model",
            ["model"],
            buckets=BATCH_BUCKETS,
            registry=registry,
        )
        self.queue = Gauge(
            "aiayn_queue_depth", "Requests waiting for the model, by model", ["model"], registry=registry
        )
        self.sentences = Counter("aiayn_sentences", "Sentences translated, by model", ["model"], registry=registry)
        self.tokens = Counter(
            "aiayn_generated_tokens",
            "Target tokens generated (the best translation of each sentence), by model",
            ["model"],
            registry=registry,
        )
        self.failed = Counter(
            "aiayn_failed_requests",
            "Requests failed by a fault of the server's, by model",
            ["model"],
            registry=registry,
        )

    def route(self, path: str) -> str:
        return path if path in self.routes else "/static/" if path.startswith("/static/") else "other"

    def answered(self, path: str, method: str, status: int, seconds: float) -> None:
        route = self.route(path)
        self.requests.labels(route, method if method in ("GET", "POST", "HEAD") else "other", str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def batch(self, model: str, lines: int, tokens: int) -> None:
        self.batch_lines.labels(model).observe(lines)
        self.sentences.labels(model).inc(lines)
        self.tokens.labels(model).inc(tokens)

    def render(self) -> bytes:
        return generate_latest(self.registry)
