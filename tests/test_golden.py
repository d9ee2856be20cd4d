"""Every result of the stored-output catalogue (tests/golden_cases.py) is the
same, bit for bit, as the stored digests, at 1, 2 and 3 threads: a change
to the code's structure must not change a single bit of any result."""
import json

import pytest
from golden_cases import STORE, digests


@pytest.fixture(scope="module")
def stored():
    with open(STORE) as fh:
        return json.load(fh)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_results_equal_the_stored_digests(stored, n_threads):
    got = digests(n_threads)
    assert sorted(got) == sorted(stored), "the catalogue's cases changed: regenerate on purpose"
    changed = sorted(k for k in stored if got[k] != stored[k])
    assert not changed, f"{len(changed)} of {len(stored)} results changed: {changed[:20]}"


def test_the_catalogue_is_not_degenerate(stored):
    # distinct cases give distinct digests (a stuck or empty digest would not)
    assert len(set(stored.values())) > 0.95 * len(stored)
