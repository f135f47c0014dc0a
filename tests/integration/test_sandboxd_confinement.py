"""What a sandbox sees of its host, whichever backend runs it (make test
runs every test_sandboxd_*.py on Docker and on crun): /proc's masked
files, Docker's list and /proc/interrupts (the host's interrupt counts
per CPU, a timing side channel), read as empty; one beside them that is
not masked reads as it does.
"""
import os

from sandboxd_fixtures import minimal_tag, start_sandboxd  # noqa: F401


def test_the_hosts_kernel_counters_read_empty(start_sandboxd):
    masked = [f for f in ("/proc/interrupts", "/proc/timer_list",
                          "/proc/sched_debug", "/proc/kcore")
              if os.path.exists(f)]
    assert "/proc/interrupts" in masked
    s = start_sandboxd()
    name = s.create()
    out = s.shell(name, f"for f in {' '.join(masked)} /proc/stat; do "
                        "echo $f $(wc -c < $f); done")
    sizes = dict(line.split() for line in out["stdout"].splitlines())
    assert sizes.pop("/proc/stat") != "0", out
    assert sizes == {f: "0" for f in masked}, out
