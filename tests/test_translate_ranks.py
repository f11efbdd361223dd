"""`torchrun -m aiayn translate`: 2 Gloo processes write the same output file as one process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from aiayn.cli import main
from test_translate import LINES, build_tiny_model_dir, data_dir  # noqa: F401  (a fixture)

REPO = Path(__file__).resolve().parents[1]


def test_two_ranks_write_the_file_one_process_writes(tmp_path, data_dir):
    model = build_tiny_model_dir(tmp_path / "model", data_dir)
    source = tmp_path / "in.txt"
    lines = LINES + ["A dog runs.", "", "Three people sit on a bench.", "A child smiles.", "Rain."]  # 12 lines
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(model), "-i", str(source), "-o", str(tmp_path / "one.txt"), "-q"]) == 0
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "aiayn",
        "translate",
        "--model",
        str(model),
        "-i",
        str(source),
        "-o",
        str(tmp_path / "two.txt"),
        "-q",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    one = (tmp_path / "one.txt").read_bytes()
    assert (tmp_path / "two.txt").read_bytes() == one and one.count(b"\n") == 12
    for rank in (0, 1):  # each rank translated its half: lines rank, rank + 2, ...
        assert f"rank {rank} of 2 translated 6 of 12 lines" in done.stderr
    assert not list(tmp_path.glob(".two.txt.*"))


def test_shares_of_n_best_lines_interleave_into_the_single_process_output(tmp_path, data_dir):
    import io

    from aiayn.cli.translate import translate_stream
    from aiayn.cli.translate_ranks import translate_share
    from aiayn.translator import Translator

    translator = Translator.load(build_tiny_model_dir(tmp_path / "model", data_dir), beam_size=2, n_best=2)
    block = LINES[:5]
    one = io.StringIO()
    translate_stream(translator, io.BytesIO("\n".join(block).encode() + b"\n"), "in", one, 2, None)
    shares = [translate_share(translator, block, list(range(r, 5, 2)), 10, 2) for r in (0, 1)]
    assert all(error is None for _, error in shares)
    lines = "".join(shares[j % 2][0][j // 2] for j in range(5)).splitlines()
    expected = one.getvalue().splitlines()  # numbered from 1; the shares from line 10 + 1
    assert [line.split("\t", 1)[1] for line in lines] == [line.split("\t", 1)[1] for line in expected]
    assert [int(line.split("\t")[0]) for line in lines] == [int(line.split("\t")[0]) + 10 for line in expected]
    too_long = translate_share(translator, ["a", "x " * 150], [1], 0, None)
    assert too_long[1][0] == 2 and "more than the model's maximum" in too_long[1][1]
