"""The previous release's build (old_release.py), made once per test session."""

from __future__ import annotations

import pytest
from old_release import OldRelease, build, missing_history, previous_commit


@pytest.fixture(scope="session")
def old_release(tmp_path_factory: pytest.TempPathFactory) -> OldRelease:
    commit = previous_commit()
    why = missing_history(commit)
    if why:
        pytest.skip(why)
    return build(tmp_path_factory.mktemp("previous-release"), commit)
