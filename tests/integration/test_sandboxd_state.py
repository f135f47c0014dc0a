"""sandboxd's own files survive a crash of the host: the instance file
(lose it and every container labelled with it is orphaned) and the state
file are written beside their place, synced, renamed over it, and their
directory synced after. strace shows the order of the system calls.
"""
import os
import re

from sandboxd_fixtures import minimal_tag, start_sandboxd  # noqa: F401

CALL = re.compile(r'^(\w+)\((.*)\)\s+=\s+(-?\d+)')


def calls(trace_path):
    """(name, args, result) of every completed call in an strace log of
    one process."""
    out = []
    with open(trace_path) as f:
        for line in f:
            m = CALL.match(line)
            if m:
                out.append((m.group(1), m.group(2), int(m.group(3))))
    return out


def opened(args):
    """The path of an openat(AT_FDCWD, "path", ...) call."""
    m = re.match(r'AT_FDCWD, "([^"]*)"', args)
    return m.group(1) if m else None


def check_replaced_durably(trace, path):
    """path was replaced by a rename of path.tmp, after an fsync of the
    descriptor the .tmp was written through, and its directory synced
    after the rename. Returns how many times."""
    seen = 0
    for i, (name, args, result) in enumerate(trace):
        if name not in ("rename", "renameat", "renameat2"):
            continue
        tmp, final = f'"{path}.tmp"', f'"{path}"'
        if tmp not in args or final not in args or \
                args.index(tmp) > args.index(final):
            continue
        assert result == 0, (name, args)
        # The .tmp's descriptor: its last open before the rename.
        fd = None
        for j in range(i - 1, -1, -1):
            n, a, r = trace[j]
            if n == "openat" and opened(a) == path + ".tmp":
                fd, start = r, j
                break
        assert fd is not None and fd >= 0, f"no open of {path}.tmp"
        assert any(n in ("fsync", "fdatasync") and a == str(fd) and r == 0
                   for n, a, r in trace[start:i]), \
            f"{path}.tmp renamed without an fsync of its data"
        # The directory, synced after the rename.
        directory = os.path.dirname(path)
        synced = False
        for j in range(i + 1, len(trace)):
            n, a, r = trace[j]
            if n == "openat" and opened(a) == directory and r >= 0:
                synced = any(n2 in ("fsync", "fdatasync") and a2 == str(r)
                             and r2 == 0 for n2, a2, r2 in trace[j:j + 4])
                break
        assert synced, f"{directory} not synced after the rename of {path}"
        seen += 1
    return seen


def test_instance_and_state_files_are_synced_before_their_rename(
        start_sandboxd, tmp_path):
    trace_path = tmp_path / "trace"
    # One file per process (-ff): sandboxd's own calls, in order, never
    # split by another process's (crun, rm) between them.
    s = start_sandboxd(wrapper=[
        "strace", "-D", "-ff", "-o", str(trace_path), "-e",
        "trace=openat,fsync,fdatasync,rename,renameat,renameat2"])
    name = s.create()
    s.rpc("release", identity=name)
    assert s.stop() == 0
    trace = calls(f"{trace_path}.{s.proc.pid}")
    assert check_replaced_durably(
        trace, os.path.join(s.state_dir, "instance")) == 1
    assert check_replaced_durably(
        trace, os.path.join(s.state_dir, "state.json")) >= 1
