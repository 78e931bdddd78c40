"""tolk_core.distributed's API against numpy: in one process (a job of one) and in a 2-rank job of the
reference provider (tests/distributed/ranks_api.py); rank device names (runtime/ranks.py); `tolk launch`'s
hostfile parsing and the mpiexec flags it adds only where needed."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.distributed.conftest import launch
from tolk_core import Tensor
from tolk_core import distributed as dist
from tolk_core.distributed.launch import hostfile_slots, mpi_command
from tolk_core.errors import ConfigError, DeviceMismatchError, ShapeError, UnknownDeviceError
from tolk_core.plugins import Device
from tolk_core.runtime import ranks

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def rank1_of_2():
    """This process as rank 1 of 2 (names only: no group is joined)."""
    ranks.set_place(1, 2)
    yield
    ranks.set_place(0, 1)


def test_not_launched_is_a_job_of_one():
    assert dist.init() is None and (dist.rank(), dist.world_size()) == (0, 1)
    assert dist.devices("CPU") == ("CPU",)
    x = Tensor(np.array([1.5, -2.0], np.float32))
    for op in ("sum", "mean", "max", "min"):
        np.testing.assert_array_equal(dist.all_reduce(x, op).numpy(), [1.5, -2.0])
    assert dist.part(7) == (0, 7) and dist.local_rows(np.arange(5)).tolist() == [0, 1, 2, 3, 4]


def test_rank_device_names(rank1_of_2):
    assert dist.devices("cpu") == ("CPU@rank0", "CPU")  # this rank's entry is its local device
    assert Device.canonicalize("CPU@rank1") == "CPU" and ranks.is_remote("CPU@rank0")
    with pytest.raises(UnknownDeviceError, match="names rank 2, but this job has 2 rank"):
        Device.canonicalize("CPU@rank2")
    assert dist.part(7) == (4, 7) and dist.local_rows(np.arange(14).reshape(7, 2)).tolist() == [[8, 9], [10, 11],
                                                                                                 [12, 13]]


def test_remote_shards_are_never_computed(rank1_of_2):
    devs = dist.devices("CPU")
    x = Tensor(np.arange(12, dtype=np.float32).reshape(6, 2)).shard(devs, axis=0)
    y = (x * 2 + 1).realize()
    np.testing.assert_array_equal(dist.local_shard(y), np.arange(6, 12, dtype=np.float32).reshape(3, 2) * 2 + 1)
    remote = y.uop.src[0]
    assert remote.op.name == "RESHAPE" and remote.src[0].op.name == "BUFFER"
    from tolk_core.engine import buffers
    assert buffers._buffers.get(remote.src[0]) is None  # a placeholder: no runtime buffer was ever made
    with pytest.raises(DeviceMismatchError, match="cannot read another rank's data"):
        x.to("CPU").numpy()  # gathering a sharded value would read rank 0's rows


def test_shard_local_takes_this_ranks_rows(rank1_of_2):
    devs = dist.devices("CPU")
    data = np.arange(10, dtype=np.float32).reshape(5, 2)
    t = dist.shard_local(dist.local_rows(data), devs, 5)
    assert t.shape == (5, 2) and t.device == devs
    np.testing.assert_array_equal(dist.local_shard(t * 3), data[3:] * 3)
    with pytest.raises(ShapeError, match=r"holds rows \[3, 5\) of 5"):
        dist.shard_local(data, devs, 5)


def test_the_api_across_two_ranks(tmp_path):
    p = launch(["-n", "2", "--provider", "TCP", str(Path(__file__).with_name("ranks_api.py")), str(tmp_path)])
    assert p.returncode == 0, p.stderr[-3000:]
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    every = [x * 1, x * 2]
    for r, g in enumerate(got):
        assert (g["rank"], g["size"]) == (r, 2)
        assert g["devices"] == (["CPU", "CPU@rank1"] if r == 0 else ["CPU@rank0", "CPU"])
        np.testing.assert_array_equal(g["sum"], every[0] + every[1])
        np.testing.assert_allclose(g["mean"], (every[0] + every[1]) / 2)
        np.testing.assert_array_equal(g["max"], np.maximum(*every))
        assert g["mean_int"] == [-4, 6, 7]  # (-9, 12, 15) / 2 toward zero, as C divides
        np.testing.assert_array_equal(g["min"], np.minimum(*every))
        assert g["broadcast"] == [10.0] * 4  # rank 0's values
        assert "tensor 1 of 2 differs between rank 0 and rank 1" in g["mismatch"]
        assert g["part"] == [[0, 4], [4, 7]][r]


def test_hostfile_and_mpiexec_flags(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost\nnode2 slots=4  # a comment\n\n")
    assert hostfile_slots(str(hosts)) == [("localhost", 1), ("node2", 4)]
    cmd, env, notes = mpi_command(5, "/x/mpiexec", ["python", "t.py"], str(hosts), is_root=False)
    assert cmd == ["/x/mpiexec", "-n", "5", "--hostfile", str(hosts)] + ["python", "t.py"] and not notes
    assert env == {"TOLK_COLLECTIVES": "MPI"}
    cmd, env, notes = mpi_command(6, "/x/mpiexec", ["python", "t.py"], str(hosts), is_root=True)
    assert cmd[5:9] == ["--oversubscribe", "--mca", "mpi_yield_when_idle", "1"] and len(notes) == 2
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1" and env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    hosts.write_text("localhost slots=two\n")
    with pytest.raises(ConfigError, match="line 1: expected 'HOST \\[slots=K\\]'"):
        hostfile_slots(str(hosts))


def test_tcp_launch_refuses_other_machines(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost\nnode7\n")
    p = launch(["-n", "2", "--provider", "TCP", "--hostfile", str(hosts), "x.py"])
    assert p.returncode == 2 and "names node7: the reference provider TCP starts ranks on this machine" in p.stderr


def test_threads_per_rank_and_oversubscription(monkeypatch):
    from tolk_core.distributed import launch as launch_mod
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(launch_mod, "_cores", lambda: 8)
    assert launch_mod.thread_env(4, None)[0] == {"OMP_NUM_THREADS": "2"}
    assert launch_mod.thread_env(16, None)[0] == {"OMP_NUM_THREADS": "1"}
    assert launch_mod.thread_env(4, "hosts") == ({}, [])  # ranks spread over machines: not ours to divide
    cmd, env, _ = mpi_command(12, "mpiexec", ["python", "t.py"], is_root=False)
    assert "--oversubscribe" in cmd and env["OMP_NUM_THREADS"] == "1"  # 12 ranks on 8 cores
    assert "--oversubscribe" not in mpi_command(8, "mpiexec", ["t.py"], is_root=False)[0]
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert launch_mod.thread_env(4, None) == ({}, [])  # the user's choice stands
