"""Each fact once: the result fields come from layout.h's list, the option
defaults from config.OPTION_DEFAULTS; what is derived from them agrees."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from shmatari import _core, atari, config


def test_env_config_options_are_the_option_defaults():
    fields = {f.name: f for f in dataclasses.fields(config.EnvConfig)}
    for name, default in config.OPTION_DEFAULTS.items():
        # an option whose default is None (render_mode) takes a string or None
        expected = str | None if default is None else type(default)
        assert fields[name].default == default and fields[name].type == expected, name
    cfg = config.build_config("null", 2, seed=0)
    assert cfg.env_options() == config.OPTION_DEFAULTS


def test_atari_core_takes_its_options_from_a_config():
    """AtariCore has no defaults of its own to drift from OPTION_DEFAULTS."""
    with pytest.raises(TypeError, match="frame_skip"):
        _core.AtariCore(None, None, [0], "rom")


def test_every_result_field_is_an_env_core_attribute():
    """The core's result, its attributes and the slot's fields are one list."""
    assert _core.RESULT_FIELDS == tuple(name for name, _ in _core.FIELDS[1:])
    core = atari.build_core(config.build_config("null", 1, seed=0, stack_num=2), 0, None)
    core.reset()
    for _ in range(3):
        core.step(0)
    values = dict(zip(_core.RESULT_FIELDS, core.result()))
    assert values == {name: getattr(core, name) for name in _core.RESULT_FIELDS}
    assert (values["elapsed_step"], values["frame_number"], values["flags"]) == (3, 3, 0)
    presented = dict((name, dt) for name, dt in zip(
        (s[0] for s in _core.FIELD_SPECS), (s[2] for s in _core.FIELD_SPECS)))
    for name, value in values.items():
        assert isinstance(value, bool) == (presented[name] == "shmatari_bool8"), name
    with pytest.raises(AttributeError, match="no attribute 'nosuch'"):
        core.nosuch  # noqa: B018


def test_header_words_reads_every_member_but_the_reserved_ones():
    header = _core.compute_layout(num_envs=3, num_workers=1, batch_size=3, ring_depth=2,
                                  stack_num=1, img_height=2, img_width=2, channels=1,
                                  frame_skip=1)
    words = _core.header_words(header)
    members = _core.MEMBERS["shmatari_header"]
    assert set(words) == {m for m in members if not m.startswith("reserved")}
    for name, value in words.items():
        offset, dtype, count = members[name]
        raw = np.frombuffer(header, dtype, count, offset).tolist()
        assert value == (raw if count > 1 else raw[0]), name
    assert words["abi_minor"] == _core.ABI_MINOR and words["num_envs"] == 3


def test_cython_declarations_of_the_structs_are_made_from_the_lists():
    """_core.pxd declares no struct member by hand: setup.py writes them from
    layout.h's lists, and they agree with the offset table that the C
    preprocessor made from the same lists (name, element type and count)."""
    from pathlib import Path

    # setup.py writes it into the source tree of whatever it built from (an
    # editable install, or `pip install .` from a clone, as CI does)
    pxi = Path(__file__).parents[1] / "src" / "shmatari" / "_core_structs.pxi"
    if not pxi.exists():
        pytest.skip("this tree was not built here: no generated _core_structs.pxi")
    declared, struct = {}, None
    for line in pxi.read_text().splitlines():
        if line.startswith("    ctypedef struct "):
            struct = line.split()[-1].rstrip(":")
            declared[struct] = {}
        elif struct and line.startswith("        "):
            ctype, member = line.split()
            name, _, count = member.partition("[")
            declared[struct][name] = (np.dtype(ctype.removesuffix("_t")),
                                      int(count.rstrip("]") or 1))
    assert set(declared) == {"shmatari_header", "shmatari_env_ctrl", "shmatari_worker_ctrl",
                             "shmatari_slot_header"}
    for struct, members in declared.items():
        table = {name: (dtype, count) for name, (_, dtype, count) in _core.MEMBERS[struct].items()
                 if not name.startswith("reserved")}
        assert members == table, struct
    assert "enum shmatari_field" in pxi.read_text()
    assert "ctypedef struct shmatari_header" not in Path(__file__).parents[1].joinpath(
        "src", "shmatari", "_core.pxd").read_text()
