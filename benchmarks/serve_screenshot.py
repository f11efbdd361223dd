"""docs/serve.png: the page of `aiayn serve` in headless Chromium, after translating one sentence.

    .venv/bin/python benchmarks/serve_screenshot.py --model runs/multi30k-en-de/model --out docs/serve.png

Needs Debian's chromium (apt-get install -y chromium) and the playwright package (never
`playwright install`: it downloads a browser build).
"""

from __future__ import annotations

import argparse
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
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    command = [sys.executable, "-m", "aiayn", "serve", "--model", args.model, "--port", str(args.port)]
    for name in ("source_lang", "target_lang"):
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
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(url + "/")
            page.wait_for_selector("body[data-ready=true]", timeout=120_000)
            page.fill("[data-testid=source]", args.sentence)
            page.click("[data-testid=translate]")
            page.wait_for_selector("[data-testid=beam-tree] svg", timeout=120_000)
            page.hover("[data-testid=attention-head-view] text[data-side=q][data-index='1']")
            page.screenshot(path=args.out, full_page=True)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
