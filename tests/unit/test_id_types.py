"""Ids are NewTypes (core/domain.py): mypy --strict, as scripts/test.sh runs it, rejects an inode
number where a block id is wanted and a bare int where an id is, and MasterClient's methods ask for
them. The snippet is type-checked for real (mypy over a file in a temporary directory), so the
test fails if the ids ever become plain ints again."""
from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import typing
from collections.abc import Sequence

from curvine_py.client.master import MasterClient
from curvine_py.core.domain import BlockId, InodeId

REPO = pathlib.Path(__file__).resolve().parents[2]

SNIPPET = '''\
from curvine_py.core.domain import Attr, BlockId, BlockInfo, InodeId, NewNode, FileType


def free(block: BlockId) -> None: ...


def children_of(parent: InodeId) -> None: ...


def callers(attr: Attr, block: BlockInfo) -> None:
    free(block.block_id)                          # fine: a block id
    children_of(attr.ino)                         # fine: an inode
    NewNode(attr.ino, "x", FileType.REGULAR, 0o644)
    free(attr.ino)                                # line 14: an inode where a block id is wanted
    children_of(block.block_id)                   # line 15: a block id where an inode is wanted
    children_of(7)                                # line 16: a bare number
    children_of(InodeId(7))                       # fine: made an id on purpose
'''


def test_mypy_rejects_an_id_of_the_wrong_kind(tmp_path: pathlib.Path) -> None:
    snippet = tmp_path / "ids_misused.py"
    snippet.write_text(SNIPPET)
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--hide-error-context",
         "--cache-dir", str(tmp_path / "cache"), str(snippet)],
        check=False, cwd=REPO, capture_output=True, text=True, timeout=600)
    errors = sorted((int(m[1]), m[2]) for m in re.finditer(r"ids_misused\.py:(\d+): error: (.*)", run.stdout))
    assert errors == [
        (14, 'Argument 1 to "free" has incompatible type "InodeId"; expected "BlockId"  [arg-type]'),
        (15, 'Argument 1 to "children_of" has incompatible type "BlockId"; expected "InodeId"  [arg-type]'),
        (16, 'Argument 1 to "children_of" has incompatible type "int"; expected "InodeId"  [arg-type]'),
    ], run.stdout + run.stderr
    assert run.returncode == 1


def test_master_client_asks_for_ids() -> None:
    hints = typing.get_type_hints(MasterClient.abandon_blocks)
    assert hints["ino"] is InodeId
    assert hints["block_ids"] == Sequence[BlockId]
    for method in (MasterClient.lookup, MasterClient.unlink, MasterClient.readdir):
        assert next(iter(typing.get_type_hints(method).values())) is InodeId, method.__name__
    assert typing.get_type_hints(MasterClient.rename)["new_parent"] is InodeId
    assert typing.get_type_hints(MasterClient.get_blocks)["ino"] is InodeId
