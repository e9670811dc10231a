"""Two "hosts" (issue [16]): two network namespaces joined by a veth pair, each under a
hostname of its own, one MPICH rank in each (hydra's ssh bootstrap replaced by a script
that enters the namespace), UCX told to use TCP (it would otherwise find the other rank on
the same machine and use shared memory, which a second machine would not have). A graph
placed over the two tasks with a 4 MiB transfer each way (a channel, the output) matches
the single-process run, and the veth carries the transfers. Needs root, `ip netns`,
`unshare` and an MPICH install (tests/distributed/mpi_installs.py); skipped, saying which
is missing, otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest
from mpi_installs import environment, installs

import flowc
from flowc.frontend import api

TASK = "/job:worker/task:{}/cpu:0"
N = 1 << 20  # floats: 4 MiB per transfer
BOOTSTRAP = """#!/bin/sh
# as ssh for hydra: [-options] HOST COMMAND... runs COMMAND in HOST's namespace
while [ "${{1#-}}" != "$1" ]; do shift; done
host=$1; shift
case "$host" in
  {a_ip}) ns={a} ;;
  {b_ip}) ns={b} ;;
  *) echo "unknown host $host" >&2; exit 1 ;;
esac
exec ip netns exec "$ns" unshare -u sh -c "hostname $ns; $*"
"""


def why_not() -> str | None:
    if os.geteuid() != 0:
        return "two-host test: needs root (ip netns)"
    if not shutil.which("ip") or not shutil.which("unshare"):
        return "two-host test: needs the ip and unshare commands"
    if not any(kind == "mpich" for kind, *_ in installs()):
        return "two-host test: needs an MPICH install (see tests/distributed/mpi_installs.py)"
    return None


pytestmark = pytest.mark.skipif(why_not() is not None, reason=str(why_not()))


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def hosts(tmp_path):
    """Namespaces (a, b) at 10.77.0.1 and .2 joined by a veth pair; removed afterwards."""
    a, b = f"flowc{os.getpid()}a", f"flowc{os.getpid()}b"
    try:
        ip("netns", "add", a)
        ip("netns", "add", b)
        ip("link", "add", f"{a}v", "type", "veth", "peer", "name", f"{b}v")
        for ns, dev, addr in ((a, f"{a}v", "10.77.0.1/24"), (b, f"{b}v", "10.77.0.2/24")):
            ip("link", "set", dev, "netns", ns)
            ip("-n", ns, "addr", "add", addr, "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        script = tmp_path / "netns_ssh"
        script.write_text(BOOTSTRAP.format(a=a, b=b, a_ip="10.77.0.1", b_ip="10.77.0.2"))
        script.chmod(0o755)
        yield a, b, script
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def veth_bytes(ns: str) -> tuple[int, int]:
    """(sent, received) bytes of namespace `ns`'s end of the veth."""
    return tuple(int(subprocess.run(
        ["ip", "netns", "exec", ns, "cat", f"/sys/class/net/{ns}v/statistics/{what}_bytes"],
        capture_output=True, text=True, check=True).stdout) for what in ("tx", "rx"))


def test_two_namespaces_over_a_veth(hosts, tmp_path):
    a, _, script = hosts
    with api.Graph("hop") as g:
        x = api.placeholder("f32", (N,), name="x")
        with api.device(TASK.format(1)):
            y = api.tanh(x)
        with api.device(TASK.format(0)):
            z = api.sigmoid(y)
        g.output("y", z)
    flowc.compile(g.ir, tmp_path / "hop", devices=f"{TASK.format(0)},{TASK.format(1)}")
    x_value = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    np.save(tmp_path / "x.npy", x_value)
    with flowc.load(tmp_path / "hop", threads=1) as model:
        want = model.run(x_value)["y"]
    _, python, mpiexec, lib = next(i for i in installs() if i[0] == "mpich")
    env = environment(FLOWC_LIBMPI=lib, FLOWC_MPI_TIMEOUT="60", UCX_TLS="tcp,self")
    before = veth_bytes(a)
    command = (f"hostname {a}; exec {mpiexec} -genvall -bootstrap ssh -bootstrap-exec {script} "
               f"-iface {a}v -hosts 10.77.0.1,10.77.0.2 -n 2 -ppn 1 {python} -m flowc run "
               f"{tmp_path / 'hop'} --input x={tmp_path / 'x.npy'} --threads 1 "
               f"--output-dir {tmp_path / 'out'}")
    done = subprocess.run(["ip", "netns", "exec", a, "unshare", "-u", "sh", "-c", command],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), want, rtol=1e-6)
    # every rank reads x itself; task 1's tanh (4 MiB) came to rank 0 over the veth, and
    # the output (4 MiB, computed on task 0) went to rank 1 over it
    sent, received = (now - then for now, then in zip(veth_bytes(a), before, strict=True))
    assert sent >= 4 * N and received >= 4 * N, (sent, received)
