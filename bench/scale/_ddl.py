"""The store's SQLite DDL, frozen as text so the experiments need no ``soong_store`` import.

Taken from ``sqlite_master`` of a home made by the landed store (commit 65d5a36): the global tables
of revision 0001 and one session's pair from the table factory, the session id replaced by
``{sid}``. ``build.py --check-ddl`` compares it with what the installed package builds.
"""

# ruff: noqa: E501  (the DDL text is kept exactly as SQLite stores it, one source line per line)

from __future__ import annotations

GLOBAL_DDL: tuple[str, ...] = (
    (
        "CREATE TABLE alembic_version (\n"
        "\tversion_num VARCHAR(32) NOT NULL, \n"
        "\tCONSTRAINT alembic_version_pkc PRIMARY KEY (version_num)\n"
        ")"
    ),
    (
        "CREATE TABLE sessions (\n"
        "\tsession_id TEXT NOT NULL, \n"
        "\tcwd TEXT NOT NULL, \n"
        "\troot_agent_id TEXT NOT NULL, \n"
        "\tactive_node_id TEXT, \n"
        "\tparent_session_id TEXT, \n"
        "\tstatus TEXT NOT NULL, \n"
        "\tmetadata_json TEXT, \n"
        "\tcreated_at TEXT NOT NULL, \n"
        "\tupdated_at TEXT NOT NULL, \n"
        "\tCONSTRAINT pk_sessions PRIMARY KEY (session_id), \n"
        "\tCONSTRAINT ck_sessions_ck_sessions_status CHECK (status IN ('active', 'archived')), \n"
        "\tCONSTRAINT fk_sessions_root_agent_id_agents FOREIGN KEY(root_agent_id) REFERENCES agents (agent_id) DEFERRABLE INITIALLY DEFERRED\n"
        ")"
    ),
    ("CREATE INDEX ix_sessions_updated_at ON sessions (updated_at)"),
    ("CREATE INDEX ix_sessions_status_updated_at ON sessions (status, updated_at)"),
    (
        "CREATE TABLE agents (\n"
        "\tagent_id TEXT NOT NULL, \n"
        "\tsession_id TEXT NOT NULL, \n"
        "\tparent_agent_id TEXT, \n"
        "\tagent_type TEXT NOT NULL, \n"
        "\tcreated_by_run_id TEXT, \n"
        "\tfork_from_node_id TEXT, \n"
        "\tstatus TEXT NOT NULL, \n"
        "\tresult_json TEXT, \n"
        "\tmetadata_json TEXT, \n"
        "\tcreated_at TEXT NOT NULL, \n"
        "\tupdated_at TEXT NOT NULL, \n"
        "\tCONSTRAINT pk_agents PRIMARY KEY (agent_id), \n"
        "\tCONSTRAINT ck_agents_ck_agents_agent_type CHECK (agent_type IN ('main', 'orchestrator', 'sub', 'fork')), \n"
        "\tCONSTRAINT ck_agents_ck_agents_status CHECK (status IN ('idle', 'running', 'completed', 'failed', 'cancelled')), \n"
        "\tCONSTRAINT fk_agents_created_by_run_id_runs FOREIGN KEY(created_by_run_id) REFERENCES runs (run_id) DEFERRABLE INITIALLY DEFERRED, \n"
        "\tCONSTRAINT fk_agents_parent_agent_id_agents FOREIGN KEY(parent_agent_id) REFERENCES agents (agent_id), \n"
        "\tCONSTRAINT fk_agents_session_id_sessions FOREIGN KEY(session_id) REFERENCES sessions (session_id)\n"
        ")"
    ),
    ("CREATE INDEX ix_agents_session_id ON agents (session_id)"),
    (
        "CREATE TABLE runs (\n"
        "\trun_id TEXT NOT NULL, \n"
        "\tsession_id TEXT NOT NULL, \n"
        "\tagent_id TEXT NOT NULL, \n"
        "\tstatus TEXT NOT NULL, \n"
        "\tstart_node_id TEXT, \n"
        "\tend_node_id TEXT, \n"
        "\tend_reason TEXT, \n"
        "\tturn_count INTEGER, \n"
        "\tusage_json TEXT, \n"
        "\terror_json TEXT, \n"
        "\tmetadata_json TEXT, \n"
        "\tcreated_at TEXT NOT NULL, \n"
        "\tupdated_at TEXT NOT NULL, \n"
        "\tCONSTRAINT pk_runs PRIMARY KEY (run_id), \n"
        "\tCONSTRAINT ck_runs_ck_runs_status CHECK (status IN ('queued', 'pending', 'running', 'completed', 'failed', 'aborted', 'cancelled')), \n"
        "\tCONSTRAINT ck_runs_ck_runs_end_reason CHECK (end_reason IS NULL OR end_reason IN ('completed', 'max_turns', 'aborted_streaming', 'aborted_tools', 'prompt_too_long', 'max_output_tokens_recovery', 'failed')), \n"
        "\tCONSTRAINT ck_runs_ck_runs_turn_count CHECK (turn_count IS NULL OR turn_count >= 0), \n"
        "\tCONSTRAINT fk_runs_agent_id_agents FOREIGN KEY(agent_id) REFERENCES agents (agent_id), \n"
        "\tCONSTRAINT fk_runs_session_id_sessions FOREIGN KEY(session_id) REFERENCES sessions (session_id)\n"
        ")"
    ),
    ("CREATE INDEX ix_runs_agent_id ON runs (agent_id)"),
    ("CREATE INDEX ix_runs_session_id_status ON runs (session_id, status)"),
    (
        "CREATE TABLE artifacts (\n"
        "\tartifact_id TEXT NOT NULL, \n"
        "\tsession_id TEXT NOT NULL, \n"
        "\tagent_id TEXT, \n"
        "\trun_id TEXT, \n"
        "\tnode_id TEXT, \n"
        "\ttool_call_id TEXT, \n"
        "\tpath TEXT NOT NULL, \n"
        "\tfilename TEXT, \n"
        "\tmime_type TEXT, \n"
        "\tsize_bytes INTEGER, \n"
        "\tsummary TEXT, \n"
        "\tmetadata_json TEXT, \n"
        "\tcreated_at TEXT NOT NULL, \n"
        "\tCONSTRAINT pk_artifacts PRIMARY KEY (artifact_id), \n"
        "\tCONSTRAINT ck_artifacts_ck_artifacts_size_bytes CHECK (size_bytes IS NULL OR size_bytes >= 0), \n"
        "\tCONSTRAINT fk_artifacts_session_id_sessions FOREIGN KEY(session_id) REFERENCES sessions (session_id)\n"
        ")"
    ),
    ("CREATE INDEX ix_artifacts_session_id ON artifacts (session_id)"),
    ("CREATE INDEX ix_artifacts_path ON artifacts (path)"),
)

SEED_PAIR_DDL: tuple[str, ...] = (
    (
        "CREATE TABLE nodes_{sid} (\n"
        "\tnode_id TEXT NOT NULL, \n"
        "\tnode_seq INTEGER NOT NULL, \n"
        "\tparent_id TEXT, \n"
        "\tagent_id TEXT NOT NULL, \n"
        "\trun_id TEXT, \n"
        "\trole TEXT NOT NULL, \n"
        "\tnode_type TEXT NOT NULL, \n"
        "\tcontent_json TEXT NOT NULL, \n"
        "\tmetadata_json TEXT, \n"
        "\ttoken_count INTEGER, \n"
        "\tcreated_at TEXT NOT NULL, \n"
        "\tPRIMARY KEY (node_id), \n"
        "\tCONSTRAINT nodes_{sid}_node_seq_uq UNIQUE (node_seq), \n"
        "\tCONSTRAINT ck_role CHECK (role IN ('user', 'assistant', 'tool', 'system')), \n"
        "\tCONSTRAINT ck_node_type CHECK (node_type IN ('message', 'skill_context', 'memory_context', 'compaction', 'child_result', 'plan_instruction', 'task_instruction', 'task_board', 'system_note')), \n"
        "\tCONSTRAINT ck_node_seq CHECK (node_seq >= 1), \n"
        "\tCONSTRAINT ck_token_count CHECK (token_count IS NULL OR token_count >= 0), \n"
        "\tFOREIGN KEY(parent_id) REFERENCES nodes_{sid} (node_id) DEFERRABLE INITIALLY DEFERRED\n"
        ")"
    ),
    ("CREATE INDEX nodes_{sid}_parent_id_ix ON nodes_{sid} (parent_id)"),
    (
        "CREATE TABLE events_{sid} (\n"
        "\tevent_id TEXT NOT NULL, \n"
        "\tseq INTEGER NOT NULL, \n"
        "\trun_seq INTEGER, \n"
        "\tagent_id TEXT, \n"
        "\trun_id TEXT, \n"
        "\tlevel TEXT NOT NULL, \n"
        "\tevent_type TEXT NOT NULL, \n"
        "\tnode_id TEXT, \n"
        "\ttool_call_id TEXT, \n"
        "\tpayload_json TEXT, \n"
        "\tcreated_at TEXT NOT NULL, \n"
        "\tPRIMARY KEY (event_id), \n"
        "\tCONSTRAINT events_{sid}_seq_uq UNIQUE (seq), \n"
        "\tCONSTRAINT events_{sid}_run_seq_uq UNIQUE (run_id, run_seq), \n"
        "\tCONSTRAINT ck_level CHECK (level IN ('debug', 'info', 'warning', 'error')), \n"
        "\tCONSTRAINT ck_seq CHECK (seq >= 1), \n"
        "\tCONSTRAINT ck_run_seq CHECK ((run_id IS NULL) = (run_seq IS NULL)), \n"
        "\tFOREIGN KEY(node_id) REFERENCES nodes_{sid} (node_id) DEFERRABLE INITIALLY DEFERRED\n"
        ")"
    ),
    ("CREATE INDEX events_{sid}_node_id_ix ON events_{sid} (node_id)"),
)
