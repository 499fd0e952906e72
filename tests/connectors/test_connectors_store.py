"""The knowledge store reads past a garbled version: whatever its header holds, it is skipped with a warning
and the previous version is used."""

from __future__ import annotations

from pathlib import Path

import pytest

from daedalus.connectors.store import MAGIC, Store, decode, encode
from daedalus.models.config import LoopConfig
from daedalus.models.errors import KnowledgeError
from daedalus.models.knowledge import Knowledge

GARBLED = [
    MAGIC + b" sha256 bytes=12",  # a field without `=`
    MAGIC + b" sha256=00 bytes=zz",  # a length that is not a number
    MAGIC + b" sha256=00",  # no length at all
    MAGIC + b" sha256=\xff\xfe bytes=2",  # not UTF-8
]


@pytest.mark.parametrize("header", GARBLED)
def test_a_garbled_header_is_a_knowledge_error(header):
    with pytest.raises(KnowledgeError, match="malformed header"):
        decode(header + b"\n{}")


@pytest.mark.parametrize("header", GARBLED[:2])
def test_the_store_falls_back_past_a_version_with_a_garbled_header(tmp_path, header):
    store = Store(str(tmp_path / "k"))
    knowledge = Knowledge.new("j", LoopConfig())
    for loops in (1, 2):
        knowledge.loops = loops
        store.job(knowledge.job).save(knowledge)
    newest = Path(store.job("j").path(2))
    newest.write_bytes(header + b"\n" + newest.read_bytes().partition(b"\n")[2])
    loaded = store.job("j").load()
    assert (loaded.version, loaded.knowledge.loops) == (1, 1)
    assert loaded.warnings == [f"knowledge version 2 of 'j' is unreadable (malformed header {header!r}); falling back"]


def test_a_sound_file_still_decodes():
    assert decode(encode(b"payload")) == b"payload"
