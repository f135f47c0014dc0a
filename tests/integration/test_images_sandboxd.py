"""Every sandbox type of images/ created through sandboxd, the way a user
gets one: sandboxd's own confinement (every capability dropped but what the
agent needs, no-new-privileges, its own workspace directory on the host,
the agent reached over its unix socket) around the images tools/build-image
made. Each type must work end to end there, commands running as the
image's user.
"""
import re

import pytest

from conftest import result_texts
from sandboxd_fixtures import minimal_tag, start_sandboxd  # noqa: F401
from test_images import (PAGE, TAG, TYPES, images, text_of)  # noqa: F401


@pytest.fixture
def sbxd(images, start_sandboxd):  # noqa: F811
    return start_sandboxd(tag=TAG, env={
        "SANDBOXD_HEALTH_INTERVAL": "5"})


def agent(s, name, method, path, **kw):
    """A request to the sandbox's agent through sandboxd's proxy."""
    return s.session.request(method, f"{s.url}/v1/sandboxes/{name}/agent/"
                             + path, timeout=180, **kw)


def shell(s, name, command, **extra):
    res = s.rpc("call_tool", identity=name, tool_name="run_shell_command",
                arguments={"command": command, **extra})
    return res, result_texts(res)


def tool(s, name, tool_name, **arguments):
    res = s.rpc("call_tool", identity=name, tool_name=tool_name,
                arguments=arguments)
    assert res.get("isError") is not True, (tool_name, res)
    return res


@pytest.mark.parametrize("sandbox_type", TYPES)
def test_each_type_works_through_sandboxd_as_the_images_user(sbxd,
                                                             sandbox_type):
    name = sbxd.create(sandbox_type)
    res, t = shell(sbxd, name, "id -u; id -g; pwd; echo x > by-command; "
                   "stat -c %u by-command")
    assert t["returncode"] == "0", res
    assert t["stdout"].split("\n")[:4] == ["1000", "1000", "/workspace",
                                           "1000"]
    # A file the agent writes is the user's to change and remove.
    r = agent(sbxd, name, "PUT", "workspace/file?path=d/by-agent.txt",
              data=b"from the agent")
    assert r.status_code == 200, r.text
    res, t = shell(sbxd, name, "stat -c %u d/by-agent.txt && "
                   "echo more >> d/by-agent.txt && rm -r d && echo gone")
    assert t["stdout"] == "1000\ngone\n", res
    # The agent can still stop the user's commands.
    res, t = shell(sbxd, name, "echo started; sleep 60", timeout=1)
    assert t["stdout"] == "started\n" and t["returncode"] != "0", res
    # And they cannot do what the agent may.
    res, t = shell(sbxd, name, "chown 0 by-command")
    assert t["returncode"] != "0", res
    assert sbxd.rpc("release", identity=name) is True


def test_base_ipython_and_git_through_sandboxd(sbxd):
    name = sbxd.create("base")
    first = tool(sbxd, name, "run_ipython_cell", code="x = 41\nimport os")
    assert result_texts(first)["stdout"] == ""
    res = tool(sbxd, name, "run_ipython_cell", code="print(x + 1, os.getuid())")
    assert result_texts(res)["stdout"] == "42 1000\n"
    shell(sbxd, name, "echo one > notes.txt")
    r = agent(sbxd, name, "POST", "watcher/commit_changes",
              json={"commit_message": "by the agent"})
    assert r.status_code == 200, r.text
    # The repository the agent wrote to stays the user's own.
    res, t = shell(sbxd, name, "echo two >> notes.txt && git commit -qam "
                   "'by the user' && git log --format=%s")
    assert t["stdout"] == "by the user\nby the agent\n", res
    diff = agent(sbxd, name, "POST", "watcher/generate_diff",
                 json={"commit_a": None, "commit_b": None}).json()
    assert diff == {"diffs": {}}


def test_filesystem_tools_through_sandboxd(sbxd):
    name = sbxd.create("filesystem")
    listed = sbxd.rpc("list_tools", identity=name)
    assert "write_file" in listed["filesystem"]
    tool(sbxd, name, "create_directory", path="/workspace/docs")
    tool(sbxd, name, "write_file", path="/workspace/docs/a.md",
         content="alpha\n")
    tool(sbxd, name, "edit_file", path="/workspace/docs/a.md",
         edits=[{"oldText": "alpha", "newText": "beta"}])
    assert text_of(tool(sbxd, name, "read_file",
                        path="/workspace/docs/a.md")) == "beta\n"
    assert "[FILE] a.md" in text_of(tool(sbxd, name, "list_directory",
                                         path="/workspace/docs"))
    # What the tools made belongs to the user commands run as.
    res, t = shell(sbxd, name, "stat -c %u docs docs/a.md && rm -r docs")
    assert t["stdout"] == "1000\n1000\n", res


def test_browser_through_sandboxd(sbxd):
    name = sbxd.create("browser")
    # The image's MCP server is listed from the first call on.
    listed = sbxd.rpc("list_tools", identity=name)
    assert any("browser_navigate" in g for g in listed.values()), listed
    r = agent(sbxd, name, "PUT", "workspace/file?path=site/index.html",
              data=PAGE.encode())
    assert r.status_code == 200, r.text
    res, t = shell(sbxd, name, "(cd site && nohup python3 -m http.server "
                   "8123 --bind 127.0.0.1 >/dev/null 2>&1 &) && for i in "
                   "$(seq 100); do python3 -c 'import socket; "
                   "socket.create_connection((\"127.0.0.1\", 8123))' "
                   "2>/dev/null && break; sleep 0.1; done")
    assert t["returncode"] == "0", res
    res = tool(sbxd, name, "browser_navigate", url="http://127.0.0.1:8123/")
    assert "Sandbox page" in text_of(res)
    snap = text_of(tool(sbxd, name, "browser_snapshot"))
    ref = re.search(r'button "Press me" \[ref=(\w+)\]', snap).group(1)
    tool(sbxd, name, "browser_click", element="Press me button", ref=ref)
    assert "clicked, changed" in text_of(tool(sbxd, name,
                                              "browser_snapshot"))
