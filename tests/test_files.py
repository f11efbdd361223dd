"""Files written whole or not at all, through a temporary name that no other file has."""

import os
import stat

import pytest

from aiayn.files import temporary_beside
from aiayn.weights import write_atomic


def test_write_atomic_leaves_a_users_tmp_file_alone_and_gives_open_s_permissions(tmp_path):
    users = tmp_path / "results.json.tmp"
    users.write_text("mine")
    plain = tmp_path / "plain.json"
    plain.write_text("{}")  # what open() gives a new file under this umask
    write_atomic(tmp_path / "results.json", b'{"bleu": 1}')
    assert (tmp_path / "results.json").read_bytes() == b'{"bleu": 1}'
    assert users.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.json", "results.json", "results.json.tmp"]
    mode = stat.S_IMODE(os.stat(tmp_path / "results.json").st_mode)
    assert mode == stat.S_IMODE(os.stat(plain).st_mode)


def test_two_temporaries_of_one_file_differ_and_errors_name_the_file(tmp_path):
    a, b = temporary_beside(tmp_path / "out.txt"), temporary_beside(tmp_path / "out.txt")
    assert a != b and a.parent == b.parent == tmp_path and a.name.startswith(".out.txt.")
    with pytest.raises(FileNotFoundError) as err:
        temporary_beside(tmp_path / "missing" / "out.txt")
    assert err.value.filename == str(tmp_path / "missing" / "out.txt")


def test_sweep_removes_only_temporaries_of_its_own_pattern_whose_writer_ended(tmp_path):
    import subprocess
    import sys

    from aiayn.files import HOST, sweep_temporaries

    ended = int(
        subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout
    )
    (tmp_path / "data").mkdir()
    left = tmp_path / f".spm.model.{HOST}-{ended}.abcd_123.aiayn.tmp"  # as a kill -9 mid-write leaves it
    deeper = tmp_path / "data" / f".train.safetensors.{HOST}-{ended}.x1y2z3w4.aiayn.tmp"
    live = temporary_beside(tmp_path / "test.hyp")  # this process is still writing it
    mine = [
        tmp_path / "notes.tmp",
        tmp_path / ".notes.tmp",
        tmp_path / "results.json.tmp",
        tmp_path / ".notes.abcdefgh.tmp",
    ]
    for path in [left, deeper, *mine]:
        path.write_text("the user's" if path in mine else "half")
    assert live.name.startswith(f".test.hyp.{HOST}-{os.getpid()}.") and live.name.endswith(".aiayn.tmp")
    elsewhere = tmp_path / f".notes.other_host-{ended}.abcdefgh.aiayn.tmp"  # a writer on another machine
    elsewhere.write_text("theirs")
    assert sweep_temporaries(tmp_path) == sorted([left, deeper])
    assert (
        all(p.read_text() == "the user's" for p in mine) and not left.exists() and not deeper.exists() and live.exists()
    )
    assert elsewhere.read_text() == "theirs"
