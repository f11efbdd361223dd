"""`aiayn paper --quick`: the whole report on a model it trains, and its claims table read back (issue 14)."""

from __future__ import annotations

import pytest

from aiayn.cli import main as cli_main
from aiayn.lab.report import read_claims

# The claims whose verdict is arithmetic, true of any model (the others depend on training and timing).
BY_CONSTRUCTION = [
    "2.1",
    "3.1",
    "3.2",
    "3.3",
    "3.4",
    "4.1",
    "4.2",
    "4.3",
    "5.1",
    "5.2",
    "5.3",
    "7.1",
    "7.2",
    "8.1",
    "8.2",
    "12.1",
    "12.2",
    "12.3",
    "12.4",
    "12.5",
    "13.2",
    "13.4",
]
FIGURES = [
    "recurrence_trace",
    "layer_timings",
    "change_one_word",
    "path_lengths",
    "softmax_scaling",
    "positional_encoding",
    "heads",
    "teacher_forcing",
    "bleu_vs_flops",
    "learning_rate",
    "gradient_distance",
    "appendix_attention",
    "memory",
]


def test_quick_report_holds_the_claims_that_hold_by_construction(tmp_path, data_dir, capsys):
    assert cli_main(["paper", "--quick", "--out", str(tmp_path)]) == 0
    verdicts = read_claims(tmp_path / "report.md")
    assert {f"{i}" for i in ("2.1", "5.1", "7.2", "8.1", "12.7")} <= set(verdicts)
    assert {claim: verdicts[claim] for claim in BY_CONSTRUCTION} == {claim: "holds" for claim in BY_CONSTRUCTION}
    assert verdicts["8.3"] == "not measured"  # two training runs: left out of --quick
    assert verdicts["13.3"] == "does not hold"  # the overview's "orders of magnitude" against Table 2's own numbers
    assert set(verdicts.values()) <= {"holds", "does not hold", "not measured"}
    text = (tmp_path / "report.md").read_text()
    for name in FIGURES:
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({name}.png)" in text
    assert "## 9. Table 2" in text and "3.3e+18" in text and "2.3e+19" in text
    assert (tmp_path / "report.html").read_text().count("<img ") == len(FIGURES)
    assert "claims hold" in capsys.readouterr().out


def test_bad_arguments_are_one_line_errors(tmp_path, capsys):
    assert cli_main(["paper", "--model", str(tmp_path / "none"), "--out", str(tmp_path)]) == 2
    assert "no such model directory" in capsys.readouterr().err
    for flags, message in [
        (["--layer", "0"], "argument --layer: must be at least 1, got 0"),
        (["--threads", "-1"], "argument --threads: must be at least 0, got -1"),
        (["--minutes", "0"], "argument --minutes: must be a finite number above 0, got 0"),
        (["--minutes", "nan"], "argument --minutes: must be a finite number above 0, got nan"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            cli_main(["paper", *flags, "--out", str(tmp_path)])
        assert exit_.value.code == 2 and message in capsys.readouterr().err
    assert cli_main(["paper", "--quick", "--layer", "99", "--out", str(tmp_path / "lab")]) == 2  # before training
    assert "--layer 99: the model's encoder has layers 1 to 2" in capsys.readouterr().err
    assert cli_main(["paper", "table3", "--out", str(tmp_path)]) == 2
    assert "--steps" in capsys.readouterr().err
    assert cli_main(["paper", "--quick", "--table3", str(tmp_path / "none"), "--out", str(tmp_path / "lab")]) == 2
    assert "no table3.json" in capsys.readouterr().err  # before training
    assert cli_main(["paper", "table3", "--steps", "1", "--rows", "h=3", "--out", str(tmp_path)]) == 2
    assert "unknown Table 3 rows" in capsys.readouterr().err
    assert cli_main(["paper", "--model", str(tmp_path), "--out", str(tmp_path / "lab")]) == 2  # a folder, no model
    assert "not a model directory (no config.json) nor a training folder" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # nothing written on bad input
    (tmp_path / "file").write_text("mine")
    assert cli_main(["paper", "--quick", "--out", str(tmp_path / "file")]) == 2  # said before any training
    assert "--out " + str(tmp_path / "file") + ": a file, not a folder" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["file"] and (tmp_path / "file").read_text() == "mine"
