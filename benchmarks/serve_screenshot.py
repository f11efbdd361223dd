"""docs/serve.png: the page of `aiayn serve` in headless Chromium, after translating one sentence, with every view
open (the head view, the step-through with its neuron view, sampling, neighbours); prints the page's load time.

    .venv/bin/python benchmarks/serve_screenshot.py --model runs/multi30k-en-de/model --out docs/serve.png

The load time is from the request for the page to the page ready (the models listed and the figures drawn: the
body's data-ready), in a fresh page each time, the median of --loads.

Needs Debian's chromium (apt-get install -y chromium) and the playwright package (never
`playwright install`: it downloads a browser build).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import urllib.request

ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", default="docs/serve.png")
    parser.add_argument("--sentence", default="A man in a blue shirt is riding a bike down the street.")
    parser.add_argument("--port", type=int, default=8797)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--source-lang", default=None, help="for a model directory that does not record it")
    parser.add_argument("--target-lang", default=None)
    parser.add_argument("--neighbours", default=None, help="as aiayn serve's (default: the run's training text)")
    parser.add_argument("--loads", type=int, default=5, help="page loads timed")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    command = [sys.executable, "-m", "aiayn", "serve", "--model", args.model, "--port", str(args.port)]
    for name in ("source_lang", "target_lang", "neighbours"):
        if getattr(args, name):
            command += [f"--{name.replace('_', '-')}", getattr(args, name)]
    server = subprocess.Popen(command)
    url = f"http://127.0.0.1:{args.port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/api/health", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, args=ARGS)
            loads = []
            for _ in range(args.loads):
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                start = time.perf_counter()
                page.goto(url + "/")
                page.wait_for_selector("body[data-ready=true]", timeout=120_000)
                loads.append(time.perf_counter() - start)
                page.close()
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(url + "/")
            page.wait_for_selector("body[data-ready=true]", timeout=120_000)
            page.fill("[data-testid=source]", args.sentence)
            page.click("[data-testid=translate]")
            for view in ("beam-tree", "step-stages", "next-tokens", "neighbours-list"):
                page.wait_for_selector(f"[data-testid={view}] *", timeout=300_000)
            page.select_option("[data-testid=attention-view]", "layer")
            page.locator("[data-testid=neighbours-position]").nth(1).click()
            page.wait_for_selector("[data-testid=neighbours-list][data-position='1']", timeout=300_000)
            page.locator("[data-stage=self_attention] [data-testid=step-score]").nth(1).click()
            page.fill("[data-testid=pe-dims]", "4, 5, 6, 7, 20")
            page.press("[data-testid=pe-dims]", "Enter")
            page.screenshot(path=args.out, full_page=True)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(
        f"page load to ready, {args.loads} fresh pages: median {statistics.median(loads):.2f} s "
        f"(min {min(loads):.2f}, max {max(loads):.2f})"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
