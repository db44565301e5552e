"""The facade's calls on a session's artifacts and on orphan files."""

from __future__ import annotations

from functools import partial
from typing import Any

from soong_store.model.checks import check_id, check_session_id
from soong_store.model.global_records import ArtifactRecord
from soong_store.read import record_reads
from soong_store.read.readers import ON_LOOP, ON_LOOP_BUDGETED
from soong_store.store import calls
from soong_store.store.conversation import ConversationCalls


class ArtifactCalls(ConversationCalls):
    """Store, read and list artifacts; collect the files no row names."""

    # -- artifacts --------------------------------------------------------------------------

    async def put_artifact(
        self,
        session_id: str,
        data: bytes,
        filename: str | None = None,
        mime_type: str | None = None,
        summary: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        node_id: str | None = None,
        tool_call_id: str | None = None,
        metadata: Any = None,
    ) -> ArtifactRecord:
        """Store ``data`` as a file of the session (an attachment, a tool's output)."""
        async with self.transaction(session_id) as tx:
            tx.add_artifact(
                data,
                filename=filename,
                mime_type=mime_type,
                summary=summary,
                agent_id=agent_id,
                run_id=run_id,
                node_id=node_id,
                tool_call_id=tool_call_id,
                metadata=metadata,
            )
        return tx.artifacts[0]

    async def get_artifact(self, artifact_id: str) -> ArtifactRecord:
        """One artifact's row."""
        aid = check_id(artifact_id, "artifact")
        query = partial(record_reads.get_artifact, artifact_id=aid)
        return await self._runtime.read(query, ON_LOOP)

    async def list_artifacts(self, session_id: str) -> list[ArtifactRecord]:
        """A session's artifacts in creation order."""
        sid = check_session_id(session_id)
        query = partial(record_reads.list_artifacts, session_id=sid)
        return await self._runtime.read(query, ON_LOOP_BUDGETED)

    async def read_artifact(self, artifact_id: str) -> bytes:
        """The bytes of an artifact (``StorageError`` if its file is missing or damaged)."""
        return await calls.read_artifact(self._runtime, await self.get_artifact(artifact_id))

    async def gc(self, dry_run: bool = False, min_age: float = 600.0) -> list[str]:
        """Remove artifact files no row names (left by a crash between file and commit).

        Entries younger than ``min_age`` seconds are left alone: they may belong to a unit of
        work that is about to commit. Links are removed as links, never followed. Returns the
        orphan paths (relative to ``<home>/artifacts``). The rows are checked and the files
        unlinked in one writer job, so a file a row names is never removed.
        """
        return await calls.collect_garbage(self._runtime, dry_run, min_age)
