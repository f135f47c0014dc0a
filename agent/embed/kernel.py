# The IPython kernel of sandbox-agent; agent/kernel.c runs it with -u -c and
# a bootstrap that reads this script from fd 4 and runs it as -c would.
# Protocol on fd 3, a socket pair: frames of a 4-byte big-endian length and
# UTF-8 JSON. We send {"ready": ...} once the shell is up (or exit with the
# reason on stderr); then for each {"code", "marker"} we say {"started"}
# (the agent interrupts a cell only once it runs), run the cell, write the
# marker to our stdout and stderr pipes, so the agent knows where the
# cell's output ends (that of child processes included), and answer
# {"images": [MCP image items]}, no more of them than the cell's
# "images_limit" allows (the agent refuses larger frames); the rest are
# dropped, with a note on stderr.
import sys
# Not the workspace ('' first in sys.path with -c) while we import: a
# json.py there must not replace ours. Cells get it back, as in Jupyter.
CWD_FIRST = sys.path[:1] == [""]
if CWD_FIRST:
    del sys.path[0]
import base64
import importlib.util
import json
import os
import signal
import socket
import struct

IMAGE_TYPES = ("image/png", "image/jpeg")


def main():
    ctl = socket.socket(fileno=3)
    ctl.set_inheritable(False)
    frames = ctl.makefile("rb")
    # Private copies: user code may close or redirect fds 1 and 2.
    ends = (os.dup(1), os.dup(2))

    def frame(obj):
        data = json.dumps(obj).encode()
        return struct.pack(">I", len(data)) + data
    started = frame({"started": True})

    try:
        import IPython
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config
    except ImportError as e:
        sys.exit(f"IPython cannot be imported by {sys.executable}: {e}")

    class Shell(InteractiveShell):
        # !cmd without a pty: plain output, stderr kept apart.
        system = InteractiveShell.system_raw

        def _showtraceback(self, etype, evalue, stb):
            print(self.InteractiveTB.stb2text(stb), file=sys.stderr)

    # As ipykernel does: figures come back as images at the end of a cell.
    if importlib.util.find_spec("matplotlib_inline") is not None:
        os.environ.setdefault("MPLBACKEND",
                              "module://matplotlib_inline.backend_inline")
    config = Config()
    config.HistoryManager.enabled = False
    shell = Shell.instance(config=config, colors="NoColor")
    shell.display_formatter.active_types = ["text/plain", *IMAGE_TYPES]
    images = []
    limit = {"count": 0, "bytes": 0}
    dropped = []

    def keep(mime, data):
        if isinstance(data, bytes):
            data = base64.b64encode(data).decode()
        image = {"type": "image", "data": data, "mimeType": mime}
        if image in images:  # a figure both shown and returned
            return
        size = sum(len(i["data"]) + 64 for i in images) + len(data) + 64
        if len(images) >= limit["count"] or size > limit["bytes"]:
            dropped.append(len(data))
        else:
            images.append(image)

    # display(): images to the answer, the rest printed as text.
    shell.mime_renderers = {m: (lambda d, md, m=m: keep(m, d))
                            for m in IMAGE_TYPES}
    # The last expression's value: its repr without the Out[n] prompt.
    hook = shell.displayhook
    print_value = hook.write_format_data

    def write_value(data, md=None):
        mime = next((m for m in IMAGE_TYPES if m in data), None)
        if mime is None:
            print_value(data, md)
        else:
            keep(mime, data[mime])
    hook.write_output_prompt = lambda: None
    hook.prompt_end_newline = True  # no newline before a multi-line repr
    hook.write_format_data = write_value

    # The agent interrupts a cell with SIGINT (to the group, as ^C in a
    # terminal); one late for a cell that just ended must not hurt. A
    # handler a cell sets stays for the next ones.
    def between_cells(signum, frame):
        pass
    handler = signal.signal(signal.SIGINT, between_cells)

    if CWD_FIRST:
        sys.path.insert(0, "")
    shell.run_cell("pass", store_history=False)  # the first cell is slow
    ctl.sendall(frame({"ready": True, "python": sys.version.split()[0],
                       "ipython": IPython.__version__}))
    while True:
        head = frames.read(4)
        if len(head) < 4:
            return
        cell = json.loads(frames.read(struct.unpack(">I", head)[0]))
        limit.update(cell["images_limit"])
        try:
            signal.signal(signal.SIGINT, handler)
            ctl.sendall(started)
            shell.run_cell(cell["code"], store_history=True)
        except KeyboardInterrupt:
            pass
        finally:
            handler = signal.signal(signal.SIGINT, between_cells)
        sys.stdout.flush()
        sys.stderr.flush()
        if dropped:
            os.write(ends[1], (
                f"[{len(dropped)} image(s) dropped: a cell returns at most "
                f"{limit['count']} images, {limit['bytes']} bytes of base64 "
                f"in all]\n").encode())
            dropped.clear()
        marker = cell["marker"].encode()
        for fd in ends:
            os.write(fd, marker)
        ctl.sendall(frame({"images": images}))
        images.clear()


main()
