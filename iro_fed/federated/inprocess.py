"""An in-process Flower ``Grid``: the same ServerApp logic and ClientApp handlers, no processes.

The deployment engine (real SuperLink and SuperNodes, :mod:`iro_fed.federated.local`) is how
the app runs; this grid exists for experiments that need many federations quickly (the
benchmark's strategy comparisons) and for unit tests of the server loop. It delivers each
message to the real :data:`iro_fed.federated.client_app.app` with a per-node ``Context``
(``node_config`` = the site, plus e.g. ``attack`` for a poisoning experiment) and returns the
replies; strategies, validation and evaluation are exactly the deployed ones.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from flwr.app import Context, Error, Message, Metadata, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

#: Error code of a reply whose ClientApp raised (Flower's ErrorCode.CLIENT_APP_RAISED_EXCEPTION).
ERROR_CODE = 2


class InProcessGrid(Grid):
    """Nodes ``1..n`` whose ClientApp runs in this process; ``node_configs[i]`` configures node ``i+1``."""

    def __init__(self, node_configs: Sequence[Mapping[str, Any]], run_config: Mapping[str, Any], app: Any = None,
                 run_id: int = 1) -> None:
        if app is None:
            from iro_fed.federated.client_app import app as client_app

            app = client_app
        self.app = app
        self.node_ids = list(range(1, len(node_configs) + 1))
        self.contexts = {
            nid: Context(run_id=run_id, node_id=nid, node_config=dict(cfg), state=RecordDict(),
                         run_config=dict(run_config))
            for nid, cfg in zip(self.node_ids, node_configs, strict=True)
        }
        self._run_id = run_id
        self._ids = itertools.count(1)
        self._replies: dict[str, Message] = {}
        # Messages built by strategies take the run and node identity of the current task.
        TaskIdentity.run_id = run_id
        TaskIdentity.node_id = 0
        TaskIdentity.task_id = 0

    def set_run(self, run: Any) -> None:  # pragma: no cover - not used in process
        self._run = run

    @property
    def run(self) -> Any:  # pragma: no cover - not used in process
        return getattr(self, "_run", None)

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:
        return Message(content=content, message_type=message_type, dst_node_id=dst_node_id, group_id=group_id,
                       ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.node_ids)

    def _deliver(self, msg: Message) -> Message:
        md = msg.metadata
        mid = f"m{next(self._ids)}"
        sent = Message(metadata=Metadata(run_id=md.run_id, message_id=mid, src_node_id=md.src_node_id,
                                         dst_node_id=md.dst_node_id, reply_to_message_id="", group_id=md.group_id,
                                         created_at=time.time(), ttl=md.ttl, message_type=md.message_type),
                       content=msg.content)
        try:
            return self.app(sent, self.contexts[md.dst_node_id])
        except Exception as exc:  # as a SuperNode does: a failing ClientApp answers with an error reply
            return Message(error=Error(code=ERROR_CODE, reason=f"{type(exc).__name__}: {exc}"), reply_to=sent)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            reply = self._deliver(msg)
            ids.append(reply.metadata.reply_to_message_id)
            self._replies[ids[-1]] = reply
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(i) for i in message_ids if i in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))
