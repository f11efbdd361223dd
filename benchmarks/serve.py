"""aiayn serve under load: 1, 4, 16 and 64 concurrent clients, with request batching and without.

    .venv/bin/python benchmarks/serve.py --model runs/multi30k-en-de/model            # 60 s a level
    .venv/bin/python benchmarks/serve.py --model M --seconds 5 --clients 1,4            # a quick look
    .venv/bin/python benchmarks/serve.py --model M --soak-minutes 5 --clients 16        # memory after a soak
    .venv/bin/python benchmarks/serve.py --model en-de=M1 --model en-fr=M2 --clients 1,32 --modes batching

With several --model NAME=DIR, one server holds them all; each client sends its requests to the models in
turn (client c starts at model c), so 32 clients keep 16 requests on each of two models, and 1 client is
one request at a time over both. The memory of the models after the first is the server's resident
memory once loaded, less that of a server of the first model alone (started and stopped first).

Each mode starts its own `aiayn serve` process (`--no-batching` for the other mode). Every client is
a thread with one kept-alive connection that sends Multi30k test sentences (test_2016_flickr.en),
one line per /api/translate request, back to back, for a fixed time per level. Reported per level:
sentences/s, p50 and p99 latency, failed requests, the server's model batches, and its resident
memory (after warm-up, now, and the peak, VmHWM). With --soak-minutes the last level runs that long,
the warm-up runs at that level's concurrency, and the resident memory after the soak is compared with
the value after warm-up.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SENTENCES = REPO.parent / "shared" / "data" / "multi30k" / "test_2016_flickr.en.gz"


def memory_mib(pid: int, field: str) -> float:
    """VmRSS (now) or VmHWM (peak) of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"no {field} for process {pid}")


def start_server(models: list[str], port: int, batching: bool, threads: int, passive: bool) -> subprocess.Popen:
    command = [sys.executable, "-m", "aiayn", "serve", "--port", str(port), "--max-queue", "4096"]
    command += [arg for model in models for arg in ("--model", model)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if passive:  # on cores shared with other work, PyTorch's spinning threads slow everything down
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    server = subprocess.Popen(command + ([] if batching else ["--no-batching"]), env=env)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            if get(port, "/api/health")["status"] == "ok":
                return server
        except OSError:
            pass
        time.sleep(0.5)
        if server.poll() is not None:
            raise RuntimeError(f"aiayn serve exited with {server.returncode}")
    server.kill()
    raise RuntimeError("aiayn serve did not start within 300 s")


def get(port: int, path: str) -> dict:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", path)
    return json.loads(connection.getresponse().read())


def client(
    port: int,
    lines: list[str],
    names: list[str],
    start: int,
    stop_at: float,
    latencies: list[float],
    errors: list[str],
) -> None:
    """Send one line a request, to the models in turn from model start, until stop_at; record each latency, or
    the error."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    i, turn = 97 * start, start
    while time.monotonic() < stop_at:
        body = json.dumps({"lines": [lines[i % len(lines)]], "model": names[turn % len(names)]})
        turn += 1
        began = time.monotonic()
        try:
            connection.request("POST", "/api/translate", body, {"Content-Type": "application/json"})
            reply = connection.getresponse()
            data = reply.read()
            if reply.status != 200:
                errors.append(f"{reply.status} {data[:100]!r}")
                continue
        except (OSError, http.client.HTTPException) as err:
            errors.append(repr(err))
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            continue
        latencies.append(time.monotonic() - began)
        i += 1


def level(port: int, lines: list[str], names: list[str], clients: int, seconds: float) -> dict:
    latencies: list[float] = []
    errors: list[str] = []
    before = get(port, "/api/health")
    stop_at = time.monotonic() + seconds
    threads = [
        threading.Thread(target=client, args=(port, lines, names, c, stop_at, latencies, errors))
        for c in range(clients)
    ]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - began
    after = get(port, "/api/health")
    ordered = sorted(latencies) or [float("nan")]
    return {
        "clients": clients,
        "sentences_per_s": len(latencies) / elapsed,
        "requests": len(latencies),
        "p50_s": statistics.median(ordered),
        "p99_s": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "model_batches": after["model_batches"] - before["model_batches"],
    }


def run_mode(args: argparse.Namespace, lines: list[str], batching: bool) -> list[dict]:
    port = args.port + (0 if batching else 1)
    server = start_server(args.model, port, batching, args.threads, args.passive)
    names = [m["name"] for m in get(port, "/api/model")["models"]]
    loaded = memory_mib(server.pid, "VmRSS")
    try:
        counts = [int(c) for c in args.clients.split(",")]
        # warm-up: caches, allocator, first batches; before a soak at the soak's own concurrency, so that
        # "after warm-up" and "after the soak" compare one load (a batch of 16 holds more than one of 4)
        level(port, lines, names, counts[-1] if args.soak_minutes else 4, args.warmup)
        warm = memory_mib(server.pid, "VmRSS")
        rows = []
        for n, clients in enumerate(counts):
            seconds = args.soak_minutes * 60 if args.soak_minutes and n == len(counts) - 1 else args.seconds
            row = level(port, lines, names, clients, seconds)
            row.update(
                batching=batching,
                models=len(names),
                rss_loaded_mib=loaded,
                rss_after_warmup_mib=warm,
                rss_mib=memory_mib(server.pid, "VmRSS"),
                peak_rss_mib=memory_mib(server.pid, "VmHWM"),
            )
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
        return rows
    finally:
        server.terminate()
        server.wait(timeout=30)


def table(rows: list[dict]) -> str:
    out = [
        "| batching | clients | sentences/s | p50 | p99 | errors | model batches | RSS warm / now / peak MiB |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        out.append(
            f"| {'on' if r['batching'] else 'off'} | {r['clients']} | {r['sentences_per_s']:.1f} | "
            f"{r['p50_s'] * 1000:.0f} ms | {r['p99_s'] * 1000:.0f} ms | {r['errors']} | {r['model_batches']} | "
            f"{r['rss_after_warmup_mib']:.0f} / {r['rss_mib']:.0f} / {r['peak_rss_mib']:.0f} |"
        )
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, action="append", help="[NAME=]DIR; repeat it for several models")
    parser.add_argument("--clients", default="1,4,16,64")
    parser.add_argument("--seconds", type=float, default=60.0, help="time per level")
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--soak-minutes", type=float, default=0.0, help="run the last level this long")
    parser.add_argument("--modes", default="batching,no-batching")
    parser.add_argument("--port", type=int, default=8790)
    parser.add_argument("--threads", type=int, default=2, help="the server's torch threads")
    parser.add_argument("--passive", action="store_true", help="OMP_WAIT_POLICY=PASSIVE for the server (shared cores)")
    parser.add_argument("--sentences", default=str(SENTENCES))
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    with gzip.open(args.sentences, "rt", encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    rows = []
    for mode in args.modes.split(","):
        rows += run_mode(args, lines, batching=mode == "batching")
    print(table(rows))
    if len(args.model) > 1:  # what the models after the first add: a server of the first alone, once loaded
        alone = start_server(args.model[:1], args.port + 2, True, args.threads, args.passive)
        try:
            first = memory_mib(alone.pid, "VmRSS")
        finally:
            alone.terminate()
            alone.wait(timeout=30)
        both = rows[0]["rss_loaded_mib"]
        print(
            f"resident once loaded: {both:.0f} MiB with {len(args.model)} models, {first:.0f} MiB with the first alone: "
            f"the others add {both - first:.0f} MiB"
        )
    by_clients = {r["clients"]: r for r in rows if r["batching"]}
    if 1 in by_clients:
        for n, r in sorted(by_clients.items()):
            print(f"{n} clients: {r['sentences_per_s'] / by_clients[1]['sentences_per_s']:.2f}x one request at a time")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
