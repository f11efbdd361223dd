"""Property tests (Hypothesis) of what aiayn reads from users: any input gives a result or a clear error.

A clear error is a ValueError (or FileNotFoundError) whose message names the file, field or line; any
other exception (MemoryError, KeyError, TypeError, RuntimeError, ...) fails the property. The readers:
safetensors headers, config.json, recipe YAML and its overrides, and the bytes given to `aiayn translate`.
"""

from __future__ import annotations

import io
import json
import struct
import tempfile
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from aiayn.cli.translate import translate_stream
from aiayn.config import DecodeConfig, ModelConfig
from aiayn.cpu.memory import MappedReads
from aiayn.model import Transformer
from aiayn.recipe import SECTIONS, load_recipe
from aiayn.translator import Translator
from aiayn.weights import DTYPES, load_model, read_safetensors, save_model
from test_errors import model_dir, multi30k_lines, vocab  # noqa: F401  (module fixtures)

PROPERTY = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True, database=None
)  # the same examples every run; nothing written
SLOW_PROPERTY = settings(PROPERTY, max_examples=100)  # each example builds a model

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def clear_error(err: Exception, *where: str) -> None:
    """err is a ValueError/FileNotFoundError naming one of where (a file name, a field)."""
    assert isinstance(err, (ValueError, FileNotFoundError)), repr(err)
    assert any(w in str(err) for w in where), str(err)


# -- safetensors headers ---------------------------------------------------------------------------------------


def header_bytes(header: object, data: bytes, length: int | None = None) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text) if length is None else length) + text + data


tensor_entries = st.fixed_dictionaries(
    {
        "dtype": st.sampled_from([*DTYPES, "F8_E4M3", "x"]) | json_values,
        "shape": st.lists(st.integers(-2, 6), max_size=3) | json_values,
        "data_offsets": st.lists(st.integers(-4, 300), min_size=0, max_size=3) | json_values,
    }
)
headers = st.dictionaries(st.text(max_size=6), tensor_entries | json_values, max_size=4) | json_values
safetensors_files = st.one_of(
    st.binary(max_size=300),  # random bytes
    st.builds(header_bytes, headers, st.binary(max_size=300)),  # a JSON header of any shape
    st.builds(header_bytes, headers, st.binary(max_size=64), st.integers(0, 2**64 - 1)),  # any header length
)


@PROPERTY
@given(safetensors_files)
def test_any_safetensors_file_reads_or_is_refused(content):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.safetensors"
        path.write_bytes(content)
        for read in (lambda: read_safetensors(path), lambda: read_safetensors(path, column_major=True)):
            try:
                tensors = read()
            except Exception as err:
                clear_error(err, str(path))
            else:  # what was read is what the header says
                header = json.loads(content[8 : 8 + int.from_bytes(content[:8], "little")])
                for name, t in tensors.items():
                    assert list(t.shape) == header[name]["shape"] and t.dtype == DTYPES[header[name]["dtype"]]
        try:
            MappedReads().read(path)
        except Exception as err:
            clear_error(err, str(path))


@PROPERTY
@given(st.data())
def test_a_damaged_safetensors_file_reads_or_is_refused(data):
    """A real file with bytes overwritten or cut off: the same tensors, other values, or a clear error."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "model.safetensors"
        save_file({"a": torch.arange(6.0).view(2, 3), "b": torch.ones(4, dtype=torch.int64)}, str(path))
        content = bytearray(path.read_bytes())
        for _ in range(data.draw(st.integers(1, 4))):
            at = data.draw(st.integers(0, len(content) - 1))
            content[at : at + 1] = data.draw(st.binary(min_size=1, max_size=1))
        content = content[: data.draw(st.integers(0, len(content)))]
        path.write_bytes(bytes(content))
        try:
            read_safetensors(path)
        except Exception as err:
            clear_error(err, str(path))


# -- config.json ----------------------------------------------------------------------------------------------

FIELDS = list(ModelConfig.__dataclass_fields__)
field_values = st.one_of(st.integers(-3, 40), st.sampled_from(["relu", "halves", "learned", ""]), json_values)
model_sections = st.dictionaries(st.sampled_from(FIELDS), field_values, max_size=6) | json_values
SMALL = ModelConfig.preset("tiny", vocab_size=120, n_layers=1, d_model=16, d_ff=32, n_heads=2, max_len=32)
configs = st.one_of(
    json_values,
    st.dictionaries(st.sampled_from(FIELDS), field_values, max_size=2).map(  # the real one, a field or two changed
        lambda changes: {"format": "aiayn", "model": {**SMALL.to_dict(), **changes}}
    ),
    st.fixed_dictionaries({"format": st.just("aiayn"), "model": model_sections}),
    st.fixed_dictionaries(
        {
            "format": st.just("aiayn"),
            "model": model_sections,
            "decode": st.dictionaries(
                st.sampled_from(list(DecodeConfig.__dataclass_fields__)), field_values, max_size=3
            )
            | json_values,
        }
    ),
)


@pytest.fixture(scope="module")
def small_model_dir(tmp_path_factory, vocab) -> Path:  # noqa: F811
    """A tiny model and its vocabulary; the tests replace its config.json."""
    assert len(vocab) == SMALL.vocab_size
    return save_model(Transformer(SMALL), tmp_path_factory.mktemp("small"), vocab.proto)


@SLOW_PROPERTY
@given(configs)
def test_any_config_json_loads_or_is_refused(small_model_dir, meta):
    from aiayn.model_folder import load_any

    path = small_model_dir / "config.json"
    path.write_text(json.dumps(meta))
    try:
        model, _, decode = load_any(small_model_dir)
    except Exception as err:
        clear_error(err, str(path), str(small_model_dir))
    else:  # what loads is what config.json says
        assert model.config == ModelConfig.from_dict(meta["model"])
        assert decode == (DecodeConfig.from_dict(meta["decode"]) if "decode" in meta else None)


def test_a_changed_config_that_fits_the_weights_loads(small_model_dir):
    """The property's other side: a config.json whose shapes fit the weights gives that model."""
    from aiayn.model_folder import load_any

    meta = {"format": "aiayn", "model": {**SMALL.to_dict(), "p_drop": 0.3, "activation": "gelu"}}
    (small_model_dir / "config.json").write_text(json.dumps(meta))
    assert load_any(small_model_dir)[0].config == SMALL.replace(p_drop=0.3, activation="gelu")


@PROPERTY
@given(st.binary(max_size=200))
def test_any_config_json_bytes_load_or_are_refused(small_model_dir, content):
    path = small_model_dir / "config.json"
    path.write_bytes(content)
    try:
        load_model(small_model_dir)
    except Exception as err:
        clear_error(err, str(path))


# -- recipe YAML and overrides --------------------------------------------------------------------------------

SECTION_FIELDS = {"model": ["preset", *FIELDS], **{s: list(c.__dataclass_fields__) for s, c in SECTIONS.items()}}
recipe_values = st.one_of(
    st.integers(-3, 10_000), st.floats(-2, 2), st.sampled_from(["tiny", "none", "true", "x"]), json_values
)
sections = st.sampled_from([*SECTION_FIELDS, "other"]).flatmap(
    lambda s: st.tuples(
        st.just(s),
        st.dictionaries(st.sampled_from(SECTION_FIELDS.get(s, ["x"])) | st.text(max_size=5), recipe_values, max_size=4),
    )
)
recipes = st.one_of(
    st.text(max_size=80),  # any text, mostly not YAML
    st.lists(sections, max_size=3).map(lambda items: yaml.safe_dump(dict(items))),  # YAML of any shape
)
overrides = st.lists(
    st.one_of(
        st.text(max_size=20),
        st.builds(
            lambda s, f, v: f"--{s}.{f}={v}",
            st.sampled_from([*SECTION_FIELDS, "x"]),
            st.sampled_from(sum(SECTION_FIELDS.values(), [])),
            st.text(max_size=8) | recipe_values.map(str),
        ),
    ),
    max_size=3,
)


@PROPERTY
@given(recipes, overrides)
def test_any_recipe_and_overrides_load_or_are_refused(text, items):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "r.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            recipe = load_recipe(path, items)
        except Exception as err:
            clear_error(err, str(path), "override")
        else:  # what loads makes a model configuration
            assert isinstance(recipe.model_config(recipe.data.vocab_size), ModelConfig)


@PROPERTY
@given(st.binary(max_size=120))
def test_any_recipe_bytes_load_or_are_refused(content):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "r.yaml"
        path.write_bytes(content)
        try:
            load_recipe(path)
        except Exception as err:
            clear_error(err, str(path))


# -- translation input bytes -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def translator(model_dir) -> Translator:  # noqa: F811
    return Translator.load(model_dir, beam_size=1, max_len=2)


lines = st.lists(
    st.one_of(
        st.binary(max_size=12),
        st.text(max_size=12).map(str.encode),
        st.sampled_from([b"", b" ", b"\r", b"\t", b"\x00", b"\xff", "\u2028".encode()]),
    ),
    max_size=8,
)


@SLOW_PROPERTY
@given(lines, st.booleans(), st.sampled_from([None, 1]))
def test_any_input_bytes_give_one_line_per_line_or_name_the_line(translator, parts, final_newline, n_best):
    content = b"\n".join(parts) + (b"\n" if final_newline and parts else b"")
    n_lines = content.count(b"\n") + (1 if content and not content.endswith(b"\n") else 0)
    out = io.StringIO()
    try:
        done = translate_stream(translator, io.BytesIO(content), "in.txt", out, n_best, None)
    except ValueError as err:
        assert str(err).startswith("in.txt: line "), str(err)
        bad = int(str(err).split()[2].rstrip(":"))
        assert b"\xff" in content.split(b"\n")[bad - 1] or not _utf8(content.split(b"\n")[bad - 1])
    else:
        assert done == n_lines and out.getvalue().count("\n") == n_lines
        if n_best:
            assert [int(line.split("\t")[0]) for line in out.getvalue().splitlines()] == list(range(1, n_lines + 1))


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False
