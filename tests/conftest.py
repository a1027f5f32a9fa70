import json
import os

# One BLAS thread, as .ci/run sets (before numpy loads): the CLI now runs in this process, and on
# two cores a second BLAS thread only contends (the mini model's tests run several times slower).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # noqa: E402
from hypothesis import Phase, settings  # noqa: E402

from helpers import run_cli  # noqa: E402

# Hypothesis: by default ("ci") every run draws the same examples, keeps no example database and
# times nothing; BATCHLAB_HYPOTHESIS=thorough draws new random examples on each run.
HYPOTHESIS_PROFILES = {
    "ci": settings(derandomize=True, database=None, deadline=None,
                   # no explain phase: its extra runs make a failure take minutes to report
                   phases=(Phase.explicit, Phase.generate, Phase.shrink)),
    "thorough": settings(database=None, deadline=None),
}
HYPOTHESIS = os.environ.get("BATCHLAB_HYPOTHESIS", "ci")
if HYPOTHESIS not in HYPOTHESIS_PROFILES:
    raise pytest.UsageError(f"BATCHLAB_HYPOTHESIS={HYPOTHESIS!r}: expected one of {', '.join(HYPOTHESIS_PROFILES)}")
for _name, _profile in HYPOTHESIS_PROFILES.items():
    settings.register_profile(_name, _profile)
settings.load_profile(HYPOTHESIS)


def _examples_independent_of_imports() -> None:
    """Hypothesis also draws literals it finds in every loaded module of this repository, so a
    test's examples depend on which other modules happen to be imported: the whole suite drew
    other (and for the prefix-cache identity property, four times costlier) examples than the
    test's own module alone, and a failure in CI need not reproduce alone. In the "ci" profile
    the pool is Hypothesis's own constants only."""
    # Hypothesis's internals: where a release has moved them, its examples depend on imports again
    try:
        from hypothesis.internal.conjecture import providers
        empty = providers.Constants()
    except (ImportError, AttributeError):
        return
    if hasattr(providers, "_get_local_constants"):
        providers._get_local_constants = lambda: empty


if HYPOTHESIS == "ci":
    _examples_independent_of_imports()


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def write_json(tmp_path):
    def write(obj, name="case.json") -> str:
        path = tmp_path / name
        path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
        return str(path)
    return write
