# The IPython kernel of sandbox-agent; agent/kernel.c runs it with -u -c and
# a bootstrap that reads this script from fd 4 and runs it as -c would,
# with the dialect after it ("mcp" or "e2b") and, for e2b, the directory
# to start in.
# Protocol on fd 3, a socket pair: frames of a 4-byte big-endian length and
# UTF-8 JSON. We send {"ready": ...} once the shell is up ({"ready": false,
# "error"} if we cannot change to the directory; or exit with the reason
# on stderr); then for each {"code", "marker", ...} we say {"started"}
# (the agent interrupts a cell only once it runs), run the cell, write the
# marker to our stdout and stderr pipes, so the agent knows where the
# cell's output ends (that of child processes included), and send the
# cell's last frame.
# mcp: the last frame is {"images": [MCP image items]}, no more of them
# than the cell's "images_limit" allows (the agent refuses larger frames);
# the rest are dropped, with a note on stderr. The last value is printed,
# tracebacks go to stderr.
# e2b: as E2B's code interpreter, {"started"} carries the execution count;
# while the cell runs, {"result": {format: data}, "main"} for what it
# displays and its last value (main), {"error": {"name", "value",
# "traceback"}} for its exception; the last frame is {"done": true}. The
# cell's "env" is in os.environ while it runs; a result over its "limits"
# loses its structured formats, then itself, with a note on stderr.
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
# MIME type -> the field of E2B's Result that carries it.
E2B_FIELDS = {
    "text/plain": "text", "text/html": "html", "text/markdown": "markdown",
    "image/svg+xml": "svg", "image/png": "png", "image/jpeg": "jpeg",
    "application/pdf": "pdf", "text/latex": "latex",
    "application/json": "json", "application/javascript": "javascript",
    "e2b/data": "data",
}
BINARY_TYPES = ("image/png", "image/jpeg", "application/pdf")
SCALARS = (int, float, complex, bool, str, bytes)
STRUCTURED_FIELDS = ("json", "data")


def frame(obj):
    data = json.dumps(obj, allow_nan=False).encode()
    return struct.pack(">I", len(data)) + data


def mcp_dialect(shell, ends):
    """Last value printed, images into the last frame. Returns the cell's
    hooks: before(cell) and after() -> its last frame."""
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
    hook.write_format_data = write_value

    def before(cell):
        limit.update(cell["images_limit"])
        return None

    def after():
        if dropped:
            os.write(ends[1], (
                f"[{len(dropped)} image(s) dropped: a cell returns at most "
                f"{limit['count']} images, {limit['bytes']} bytes of base64 "
                f"in all]\n").encode())
            dropped.clear()
        last = frame({"images": images})
        images.clear()
        return last
    return before, after


def plain(value):
    """A value json.dumps cannot write, as one it can (numpy's)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(type(value).__name__)


def e2b_formatters(shell, values_max):
    """As E2B's template: lists and dicts as application/json, pandas
    DataFrames' columns as e2b/data (only once pandas is imported)."""
    from IPython.core.formatters import BaseFormatter, JSONFormatter
    from traitlets import ObjectName, Unicode

    class JSONValues(JSONFormatter):
        def __call__(self, obj):
            if isinstance(obj, (list, dict)) and len(obj) < values_max:
                try:
                    return json.loads(json.dumps(obj, allow_nan=False,
                                                 default=plain))
                except (TypeError, ValueError, RecursionError):
                    pass
            return super().__call__(obj)

    class DataFrameColumns(BaseFormatter):
        format_type = Unicode("e2b/data")
        print_method = ObjectName("_repr_e2b_data_")
        _return_type = (dict, str)

        def __call__(self, obj):
            pandas = sys.modules.get("pandas")
            if pandas is None or not isinstance(obj, pandas.DataFrame):
                return super().__call__(obj)
            if obj.size >= values_max:
                return None
            return {str(name): json.loads(column.to_json(
                        orient="values", date_format="iso"))
                    for name, column in obj.items()}

    display = shell.display_formatter
    formatters = display.formatters
    formatters["application/json"] = JSONValues(parent=display)
    formatters["e2b/data"] = DataFrameColumns(parent=display)
    display.active_types = list(formatters)

    # The value of a number or a string has its text alone, unless a
    # printer was registered for its type: that text without asking the
    # other ten formatters, each behind IPython's error-catching decorator
    # (half the time of "1+1").
    text_of, every = formatters["text/plain"], display.format
    others = [f for k, f in formatters.items() if k != "text/plain"] + [
        display.ipython_display_formatter, display.mimebundle_formatter]

    def format(obj, include=None, exclude=None):
        kind = type(obj)
        if kind in SCALARS and include is None and exclude is None and \
                not any(kind in f.type_printers or ("builtins", kind.__name__)
                        in f.deferred_printers for f in others):
            return {"text/plain": text_of(obj)}, {}
        return every(obj, include, exclude)
    display.format = format


def e2b_dialect(shell, ctl, ends):
    state = {"limits": {"bytes": 0, "values": 0}, "errored": False}
    e2b_formatters(shell, 65536)

    def note(text):
        os.write(ends[1], (text + "\n").encode())

    def result(data, main):
        out = {}
        for mime, value in data.items():
            key = E2B_FIELDS.get(mime)
            if key is None or value is None:
                continue
            if isinstance(value, bytes):
                value = (base64.b64encode(value).decode()
                         if mime in BINARY_TYPES
                         else value.decode(errors="replace"))
            if key in STRUCTURED_FIELDS or isinstance(value, str):
                out[key] = value
        text = out.get("text")
        # As E2B: a string's value without its quotes.
        if text and len(text) >= 2 and text[0] == text[-1] and \
                text[0] in "'\"":
            out["text"] = text[1:-1]
        if not out:
            return
        limits = state["limits"]
        msg = {"result": out, "main": main}
        data = None
        try:
            # Every ',', ':', '[' and '{' may be a value: at most this
            # many. Other fields are strings, a value or two each.
            values = sum(json.dumps(out[k]).count(c) for k in
                         STRUCTURED_FIELDS if k in out for c in ",:[{")
            if values <= limits["values"]:
                data = frame(msg)
        except (TypeError, ValueError, RecursionError):
            pass
        if data is None or len(data) > limits["bytes"]:
            left = [k for k in STRUCTURED_FIELDS if out.pop(k, None)
                    is not None]
            data = frame(msg) if out else b""
            if not out or len(data) > limits["bytes"]:
                note(f"[a result was dropped: not valid JSON, or over "
                     f"{limits['bytes']} bytes or {limits['values']} "
                     f"values]")
                return
            note(f"[a result's {' and '.join(left)} left out: not valid "
                 f"JSON, or over {limits['values']} values]")
        ctl.sendall(data)

    def publish(data, metadata=None, source=None, **kwargs):
        result(data, False)
    shell.display_pub.publish = publish
    shell.display_pub.clear_output = lambda wait=False: None
    shell.displayhook.write_format_data = \
        lambda data, md=None: result(data, True)

    def traceback(etype, value, stb):
        if state["errored"]:
            return
        state["errored"] = True
        try:
            text = str(value)
        except Exception:
            text = ""
        ctl.sendall(frame({"error": {
            "name": getattr(etype, "__name__", str(etype)), "value": text,
            "traceback": shell.InteractiveTB.stb2text(stb)}}))
    shell.show_error = traceback

    saved = {}

    def before(cell):
        state["limits"] = cell["limits"]
        state["errored"] = False
        env = cell.get("env") or {}
        saved.clear()
        saved.update({k: os.environ.get(k) for k in env})
        os.environ.update(env)
        return {"started": True, "count": shell.execution_count}

    def after():
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        return frame({"done": True})
    return before, after


def main():
    ctl = socket.socket(fileno=3)
    ctl.set_inheritable(False)
    frames = ctl.makefile("rb")
    # Private copies: user code may close or redirect fds 1 and 2.
    ends = (os.dup(1), os.dup(2))
    dialect = sys.argv[1] if len(sys.argv) > 1 else "mcp"
    if dialect == "e2b" and len(sys.argv) > 2:
        try:
            os.chdir(sys.argv[2])
        except OSError as e:
            ctl.sendall(frame({"ready": False, "error": str(e)}))
            return

    try:
        import IPython
        from IPython.core.interactiveshell import InteractiveShell
        from traitlets.config import Config
    except ImportError as e:
        sys.exit(f"IPython cannot be imported by {sys.executable}: {e}")

    class Shell(InteractiveShell):
        # !cmd without a pty: plain output, stderr kept apart.
        system = InteractiveShell.system_raw
        show_error = None

        def _showtraceback(self, etype, evalue, stb):
            if self.show_error is not None:
                self.show_error(etype, evalue, stb)
            else:
                print(self.InteractiveTB.stb2text(stb), file=sys.stderr)

    # As ipykernel does: figures come back as images at the end of a cell.
    if importlib.util.find_spec("matplotlib_inline") is not None:
        os.environ.setdefault("MPLBACKEND",
                              "module://matplotlib_inline.backend_inline")
    config = Config()
    config.HistoryManager.enabled = False
    shell = Shell.instance(config=config, colors="NoColor")
    hook = shell.displayhook
    hook.write_output_prompt = lambda: None
    hook.prompt_end_newline = True  # no newline before a multi-line repr
    if dialect == "e2b":
        # A print is one message, as in Jupyter, not its text and its
        # newline apart; each cell ends with a flush.
        sys.stdout.reconfigure(line_buffering=True, write_through=False)
        sys.stderr.reconfigure(line_buffering=True, write_through=False)
        before, after = e2b_dialect(shell, ctl, ends)
    else:
        before, after = mcp_dialect(shell, ends)
    started = frame({"started": True})

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
        hello = before(cell)
        try:
            signal.signal(signal.SIGINT, handler)
            ctl.sendall(started if hello is None else frame(hello))
            shell.run_cell(cell["code"], store_history=True)
        except KeyboardInterrupt:
            pass
        finally:
            handler = signal.signal(signal.SIGINT, between_cells)
        sys.stdout.flush()
        sys.stderr.flush()
        last = after()
        marker = cell["marker"].encode()
        for fd in ends:
            os.write(fd, marker)
        ctl.sendall(last)


main()
