"""What the benchmarks read from the machine, in one place: CPU time of a process, of its
threads, of the whole machine and of the caller (from /proc and getrusage), and the
description of the machine every report starts with.

Linux only, as the benchmarks are.  Not a benchmark: it measures nothing itself.
"""

from __future__ import annotations

import contextlib
import os
import platform
import resource
from typing import Any

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_stat(pid: int) -> list[str]:
    """The fields of /proc/PID/stat after the command name (so ``[0]`` is the state, ``[1]``
    the parent pid, ``[11]``/``[12]`` utime/stime, ``[13]``/``[14]`` cutime/cstime, in ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def user_system_ticks(pid: int) -> tuple[int, int]:
    """utime and stime in clock ticks (10 ms): the split between user space and the kernel."""
    fields = proc_stat(pid)
    return int(fields[11]), int(fields[12])


def process_cpu_s(pid: int) -> float:
    """utime + stime of a process so far, in seconds (10 ms resolution)."""
    user, system = user_system_ticks(pid)
    return (user + system) / CLK_TCK


def threads_cpu_s(pid: int) -> float:
    """CPU time of a process's live threads so far: the sum of their schedstat run times
    (nanoseconds, where utime + stime counts 10 ms ticks); utime + stime without schedstat."""
    ns = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            path = f"/proc/{pid}/task/{task}/schedstat"
            with contextlib.suppress(FileNotFoundError), open(path) as f:  # may have exited
                ns += int(f.read().split()[0])
        return ns / 1e9
    except OSError:
        return process_cpu_s(pid)


def system_busy_s() -> float:
    """CPU-seconds busy on all cores so far (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def own_cpu_s() -> float:
    """User + system CPU of the calling process so far (all its threads)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def machine_info() -> dict[str, Any]:
    """CPU model, cores, Python and the load average as the run starts."""
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_at_start": load,
    }
