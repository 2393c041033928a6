"""config/topics.json as Quiver rewrites it: what Quiver owns (queue counts, perm, order) kept up
to date, every other field of a RocketMQ-written file (a topic's attributes, filter type and sys
flag; RocketMQ 5's top-level maps) kept as it was read."""

from __future__ import annotations

from pathlib import Path

import orjson

from localstore import MessageStore

from .conftest import message


def test_a_rewrite_keeps_the_fields_rocketmq_wrote(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MessageStore(root) as store:
        store.put(message(topic="Orders"))
    path = root / "config" / "topics.json"
    document = orjson.loads(path.read_bytes())
    entry = document["topicConfigTable"]["Orders"]
    entry["attributes"] = {"+message.type": "NORMAL"}
    entry["topicSysFlag"] = 5
    entry["topicFilterType"] = "MULTI_TAG"
    document["topicQueueMappingInfoMap"] = {"Orders": {"bname": "broker-a"}}
    path.write_bytes(orjson.dumps(document))

    with MessageStore(root) as store:
        store.put(message(topic="Refunds"))  # a new topic: the file is rewritten

    rewritten = orjson.loads(path.read_bytes())
    kept = rewritten["topicConfigTable"]["Orders"]
    assert kept["attributes"] == {"+message.type": "NORMAL"}
    assert (kept["topicSysFlag"], kept["topicFilterType"]) == (5, "MULTI_TAG")
    assert (kept["readQueueNums"], kept["writeQueueNums"]) == (4, 4)
    assert rewritten["topicQueueMappingInfoMap"] == {"Orders": {"bname": "broker-a"}}
    new = rewritten["topicConfigTable"]["Refunds"]
    assert (new["attributes"], new["topicSysFlag"], new["readQueueNums"]) == ({}, 0, 4)
    assert rewritten["dataVersion"]["counter"] > document["dataVersion"]["counter"]
