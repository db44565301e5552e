"""SoongSessionService on a PostgreSQL store: the contract's tests of ``tests/integrations``.

Each test of ``tests/integrations/test_adk.py`` that builds a service or a store runs here again,
on a database of its own (``place``); two services on one database are two hosts.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import postgres_server
from tests.integrations.test_adk import (  # noqa: F401  (collected here, with this place)
    service,
    test_a_delta_replaces_a_value_and_stores_none,
    test_a_large_event_spills_to_a_file_and_reads_back,
    test_a_padded_id_names_the_session_of_the_stripped_one,
    test_a_session_made_again_elsewhere_takes_the_next_append,
    test_a_stale_writer_raises_and_writes_nothing,
    test_a_stale_writers_error_says_so_in_adks_words,
    test_a_taken_id_raises_already_exists,
    test_a_value_json_cannot_hold_is_stored_as_its_text,
    test_an_event_round_trips_exactly,
    test_an_unknown_session_is_none,
    test_app_state_is_shared_by_every_user_of_the_app,
    test_appending_to_a_deleted_session_raises,
    test_appends_between_another_services_go_under_its_events,
    test_concurrent_appends_of_equal_copies_keep_every_event_in_order,
    test_concurrent_creates_of_one_id_make_one_session,
    test_config_reads_only_the_tail_it_returns,
    test_config_reads_the_recent_events_and_those_after_a_time,
    test_created_session_reads_back_equal_and_deletes,
    test_events_are_nodes_of_agents_and_runs,
    test_last_update_time_is_the_events_timestamp,
    test_lists_by_user_or_app_oldest_update_first_without_events,
    test_partial_events_are_neither_stored_nor_added,
    test_session_state_is_the_sessions_own,
    test_temp_keys_are_neither_state_nor_stored_in_the_event,
    test_the_same_id_under_two_users_is_two_sessions,
    test_user_state_is_shared_by_the_users_sessions_only,
    test_user_state_is_the_apps_own,
    test_what_the_service_writes_passes_the_stores_check,
)

pytestmark = pytest.mark.postgresql


@pytest.fixture
def url(pg_url: str) -> Iterator[str]:
    """A database of its own at head, copied from the run's template."""
    template = postgres_server.template_database(pg_url)
    with postgres_server.fresh_database(pg_url, template=template) as made:
        yield made


@pytest.fixture
def place(url: str, tmp_path: Path) -> dict[str, Any]:
    return {"home": tmp_path / "home", "url": url}
