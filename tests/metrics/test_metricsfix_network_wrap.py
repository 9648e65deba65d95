"""/proc/net/dev on a 32-bit kernel: a driver's ``unsigned long`` counters wrap at 2**32, which
NetworkCounter counts as a wrap, not a restart (a restart lost the bytes counted between the last
reading and the wrap). The /proc and /sys trees are fakes under tmp_path laid out as the kernel's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edge_agent.metrics import NetworkCounter, kernel_counter_bits

HEADER = ("Inter-|   Receive                                                |  Transmit\n"
          " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls "
          "carrier compressed\n")
WRAP = 2**32


def write_proc(root: Path, counters: dict[str, tuple[int, int]]) -> Path:
    (root / "net").mkdir(parents=True, exist_ok=True)
    lines = [f"{name:>6}: {rx} 10 0 0 0 0 0 0 {tx} 10 0 0 0 0 0 0\n" for name, (rx, tx) in counters.items()]
    (root / "net" / "dev").write_text(HEADER + "".join(lines))
    return root


def nic(tmp_path: Path) -> Path:
    """/sys with eth0 a PCI device."""
    device = tmp_path / "sys" / "devices" / "pci0000:00" / "0000:00:03.0" / "net" / "eth0"
    device.mkdir(parents=True)
    (tmp_path / "sys" / "class" / "net").mkdir(parents=True)
    (tmp_path / "sys" / "class" / "net" / "eth0").symlink_to(os.path.relpath(device, tmp_path / "sys" / "class" / "net"))
    return tmp_path / "sys"


def test_a_32_bit_wrap_counts_the_bytes_on_both_sides_of_it(tmp_path: Path) -> None:
    proc, sys = tmp_path / "proc", nic(tmp_path)
    counter = NetworkCounter(proc_root=write_proc(proc, {"eth0": (WRAP - 1_000, WRAP - 100)}), sys_root=sys,
                             counter_bits=32)
    first = counter.read()[:2]
    write_proc(proc, {"eth0": (500, 40)})  # 1_500 received and 140 sent, through the wrap
    rx, tx, _ = counter.read()
    # Before: read as a restart, only 500 and 40 (the 1_000 and 100 before the wrap were lost).
    assert (rx - first[0], tx - first[1]) == (1_500.0, 140.0)
    write_proc(proc, {"eth0": (2_500, 140)})
    assert counter.read()[:2] == (first[0] + 3_500.0, first[1] + 240.0)


def test_a_decrease_that_is_no_plausible_wrap_is_still_a_restart(tmp_path: Path) -> None:
    proc, sys = tmp_path / "proc", nic(tmp_path)
    counter = NetworkCounter(proc_root=write_proc(proc, {"eth0": (1_000, 5 * WRAP)}), sys_root=sys, counter_bits=32)
    assert counter.read()[:2] == (1_000.0, 5.0 * WRAP)
    # rx: a wrap would mean 4 GiB in one interval, more than half the range: the counters restarted.
    # tx: past 2**32 already, a 64-bit counter, which does not wrap there.
    write_proc(proc, {"eth0": (40, 4)})
    assert counter.read()[:2] == (1_040.0, 5.0 * WRAP + 4)


def test_a_64_bit_kernel_takes_every_decrease_as_a_restart(tmp_path: Path) -> None:
    proc, sys = tmp_path / "proc", nic(tmp_path)
    counter = NetworkCounter(proc_root=write_proc(proc, {"eth0": (WRAP - 1_000, 0)}), sys_root=sys, counter_bits=64)
    counter.read()
    write_proc(proc, {"eth0": (500, 0)})
    assert counter.read()[0] == float(WRAP - 1_000 + 500)


def test_the_default_follows_the_kernel_and_a_bad_width_is_named() -> None:
    machine = os.uname().machine
    assert kernel_counter_bits() == (64 if "64" in machine or machine in ("s390x", "alpha") else 32)
    assert NetworkCounter().counter_bits == kernel_counter_bits()
    with pytest.raises(ValueError, match="network counter_bits: must be 32 or 64, got 16"):
        NetworkCounter(counter_bits=16)
