"""The Ray backend on 2 local CPUs gives the same tables, byte for byte, as the process pool.

One Ray start for the module (it takes seconds); the sweep reuses the running instance."""

import importlib.util
import tomllib

import pytest

from batchlab.sweep import parse_config, run_sweep

from helpers import need
from helpers import small_sweep as small

RAY_CPUS = 2


@pytest.fixture(scope="module")
def ray_cluster():
    need(importlib.util.find_spec("ray") is not None,
         "Ray is not installed (pip install 'batchlab[ray]'; the test extra and .ci/run include it)")
    import ray
    ray.init(num_cpus=RAY_CPUS, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


def test_ray_and_pool_give_identical_tables(ray_cluster, tmp_path):
    cfg = parse_config(tomllib.loads(small(goodput=True)), "case.toml")
    done = []
    by_ray = run_sweep(cfg, tmp_path / "ray", backend="ray", jobs=RAY_CPUS, on_done=lambda: done.append(1),
                       parquet=True)
    assert ray_cluster.is_initialized()          # the sweep used the running instance, not its own
    by_pool = run_sweep(cfg, tmp_path / "pool", backend="pool", jobs=2, parquet=True)
    assert len(done) == by_ray.ran == 12
    assert by_ray.tables == by_pool.tables
    for name in ("points.csv", "goodput.csv", "points.parquet", "goodput.parquet"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "pool" / name).read_bytes(), name


def test_sweep_command_with_the_ray_backend(ray_cluster, tmp_path, capsys):
    from batchlab.cli import main

    config = tmp_path / "grid.toml"
    config.write_text(small())
    for backend in ("ray", "pool"):
        assert main(["sweep", str(config), "--out", str(tmp_path / backend), "--backend", backend,
                     "--jobs", str(RAY_CPUS), "--parquet"]) == 0
    capsys.readouterr()
    for name in ("points.csv", "points.parquet"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "pool" / name).read_bytes(), name
