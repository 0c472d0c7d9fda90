"""Memory: L2 core profile, L3 assertions, sensitivity and deletion propagation, recall.

| module | job |
|---|---|
| ``assertions`` | L3 assertions: compare-and-swap commits, idempotent retries, re-evaluation |
| ``forget`` | forgetting along derivation, tombstones, the deletion log and its re-application |
| ``derived`` | derived items (summaries, snippets, embeddings, contexts) and their sources |
| ``sensitivity`` / ``propagation`` | levels, sources, cloud eligibility; raising along derivation |
| ``profile`` | L2 ``USER.md`` / ``MEMORY.md``, generated read-only |
| ``home`` | a home's memory wired together (``HOME/memory.db``, index, profile) |
| ``index_api`` / ``index`` | the recall-index interface and the FTS5 + sqlite-vec index |
| ``cli`` | ``yimi memory …`` |

The L5 archive lives in ``hub.archive``.
"""
