"""The mount's settings: one table makes both the flags and the -o options, so each setting
given either way gives the same MountOptions, and mistakes in either form are refused."""
from __future__ import annotations

import pytest

from curvine_py.core.errors import InvalidArgument
from curvine_py.fuse import mountflags
from curvine_py.fuse.options import parse

BASE = ["--master", "h:1", "/mnt/x"]
# A value for each valued setting that differs from its default.
SAMPLES = {"subdir": "a/b", "node": "n7", "attr_timeout": "2.5", "entry_timeout": "3", "negative_timeout": "0.5",
           "deadline": "7", "read_ahead_kb": "2048", "max_tasks": "9", "metrics_port": "9107",
           "metrics_host": "0.0.0.0"}
ATTRIBUTE = {"deadline_s": "deadline_s"}


def _value(options: object, field: str) -> object:
    return getattr(options, ATTRIBUTE.get(field, field))


@pytest.mark.parametrize("setting", [s for s in mountflags.SETTINGS if s.option], ids=lambda s: s.field)
def test_each_setting_reads_the_same_as_a_flag_and_as_an_option(setting: mountflags.Setting) -> None:
    assert setting.option is not None
    if setting.parse is None:
        by_flag, by_option = parse([*BASE, setting.flag]), parse([*BASE, "-o", setting.option])
        assert _value(by_flag, setting.field) == setting.value
    else:
        sample = SAMPLES[setting.option]
        by_flag = parse([*BASE, setting.flag, sample])
        by_option = parse([*BASE, "-o", f"{setting.option}={sample}"])
        assert _value(by_flag, setting.field) != _value(parse(BASE), setting.field)
    assert _value(by_flag, setting.field) == _value(by_option, setting.field)


def test_atime_by_flag_or_bare_word_and_a_flag_beats_its_option() -> None:
    assert parse([*BASE, "--atime", "noatime"]).atime == parse([*BASE, "-o", "noatime"]).atime == "noatime"
    assert parse([*BASE, "-o", "deadline=3", "--deadline", "4"]).deadline_s == 4.0


@pytest.mark.parametrize("bad", [["-o", "deadline"], ["-o", "direct_io=1"], ["-o", "max_tasks=many"],
                                 ["-o", "deadline=0"], ["-o", "read_ahead_kb=0"], ["--max-tasks", "x"],
                                 ["-o", "token=s3cret"], ["-o", "master=h:2"]])
def test_malformed_or_flag_only_settings_as_options_are_refused(bad: list[str]) -> None:
    with pytest.raises(InvalidArgument):
        parse([*BASE, *bad])


def test_secrets_and_the_master_are_flags_only() -> None:
    flag_only = {s.field for s in mountflags.SETTINGS if s.option is None}
    assert {"token", "master"} <= flag_only
