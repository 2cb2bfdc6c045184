"""fuse/pagecache.py without a mount: which opens keep the kernel's page cache, and the mount
options that choose the rule."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from curvine_py.core.domain import BlockInfo, FileBlocks, FileType, Policy, blank_attr
from curvine_py.core.errors import InvalidArgument
from curvine_py.fuse.options import parse
from curvine_py.fuse.pagecache import CacheVersions, RequestCounters, Version


def reply(size: int = 10, mtime: int = 5, ctime: int = 6, ids: tuple[int, ...] = (100,)) -> FileBlocks:
    attr = replace(blank_attr(7, FileType.REGULAR), size=size, mtime_ns=mtime, ctime_ns=ctime)
    return FileBlocks(attr, tuple(BlockInfo(index=i, block_id=b, length=0) for i, b in enumerate(ids)), Policy())


def test_the_first_open_drops_and_an_unchanged_re_open_keeps() -> None:
    versions = CacheVersions()
    assert not versions.at_open(7, Version.of_blocks(reply()))
    assert versions.at_open(7, Version.of_blocks(reply()))
    assert versions.at_open(7, Version.of_attr(reply().attr)), "attributes alone (a re-open) match too"


@pytest.mark.parametrize("changed", [reply(size=11), reply(mtime=9), reply(ctime=9), reply(ids=(101,)),
                                     reply(ids=(100, 102))], ids=["size", "mtime", "ctime", "block", "blocks"])
def test_any_change_of_the_version_drops_then_the_new_one_is_kept(changed: FileBlocks) -> None:
    versions = CacheVersions()
    versions.at_open(7, Version.of_blocks(reply()))
    new = Version.of_blocks(changed)
    assert not versions.at_open(7, new)
    assert versions.at_open(7, new)


def test_local_changes_unknown_content_and_atime_drop() -> None:
    versions = CacheVersions()
    v = Version.of_blocks(reply())
    versions.at_open(7, v)
    versions.forget(7)                      # a write, truncate or commit through this mount
    assert 7 not in versions
    assert not versions.at_open(7, v)
    assert not versions.at_open(7, None), "uncommitted writes here: a content the master cannot name"
    assert 7 not in versions and not versions.at_open(7, v)
    assert not versions.at_open(7, v, drop=True), "an atime to move: the read must reach the mount"
    assert versions.at_open(7, v), "the version recorded by the dropping open still counts"


def test_disabled_never_keeps() -> None:
    versions = CacheVersions(enabled=False)
    v = Version.of_blocks(reply())
    assert not versions.at_open(7, v) and not versions.at_open(7, v)


def test_counters_are_json() -> None:
    counters = RequestCounters(reads=3)
    assert json.loads(counters.as_json())["reads"] == 3


def test_options_choose_the_rule() -> None:
    base = ["--master", "h:1", "/m"]
    default = parse(base)
    assert default.validate_cache and not default.keep_cache
    assert not parse([*base, "-o", "no_keep_cache"]).validate_cache
    assert not parse([*base, "--no-keep-cache"]).validate_cache
    assert not parse(base, env={"CURVINE_VALIDATE_CACHE": "0"}).validate_cache
    assert parse([*base, "-o", "keep_cache"]).keep_cache
    # Bad input: contradicting options and a value on a flag are refused, naming the option.
    with pytest.raises(InvalidArgument, match="contradict"):
        parse([*base, "-o", "keep_cache,no_keep_cache"])
    with pytest.raises(InvalidArgument, match="no_keep_cache=1"):
        parse([*base, "-o", "no_keep_cache=1"])
