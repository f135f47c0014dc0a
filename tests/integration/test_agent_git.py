"""The /watcher git routes of the real agent, checked against what the git
command line sees in the same repository."""
import concurrent.futures
import datetime
import os
import re
import subprocess

import pytest

from conftest import result_texts

AUTHOR = ["-c", "user.name=Tester", "-c", "user.email=tester@example.com"]


class Repo:
    """The git command line on the agent's workspace, with a HOME of its
    own so the machine's ~/.gitconfig plays no part."""

    def __init__(self, workspace, home):
        self.ws = workspace
        self.env = dict(os.environ, HOME=home,
                        XDG_CONFIG_HOME=os.path.join(home, ".config"),
                        GIT_CONFIG_NOSYSTEM="1")

    def run(self, *args, env=None):
        p = subprocess.run(["git", "-C", self.ws, *args], capture_output=True,
                           env=dict(self.env, **(env or {})), timeout=120)
        assert p.returncode == 0, p.stderr.decode(errors="replace")
        return p.stdout.decode(errors="replace")

    def write(self, path, data):
        full = os.path.join(self.ws, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)


@pytest.fixture
def home(tmp_workspace):
    h = os.path.join(os.path.dirname(tmp_workspace), "home")
    os.mkdir(h)
    return h


@pytest.fixture
def git_agent(start_agent, home):
    return start_agent(env={"HOME": home,
                            "XDG_CONFIG_HOME": os.path.join(home, ".config")})


@pytest.fixture
def repo(tmp_workspace, home):
    return Repo(tmp_workspace, home)


def commit(agent, message=None):
    body = {} if message is None else {"commit_message": message}
    r = agent.post("/watcher/commit_changes", body)
    assert r.status_code == 200, r.text
    return r.json()


def diff(agent, a=None, b=None):
    r = agent.post("/watcher/generate_diff", {"commit_a": a, "commit_b": b})
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"diffs"}
    return r.json()["diffs"]


def hunks(text):
    """The hunk lines of a unified diff (from the first @@ on), without the
    function name git puts after a hunk header."""
    lines = text.rstrip("\n").split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("@@"))
    return [re.sub(r"^(@@ -\S+ \+\S+ @@).*$", r"\1", line)
            for line in lines[start:]]


def assert_headers(path, text):
    lines = text.split("\n")
    assert lines[0] == f"--- a/{path}" and lines[1] == f"+++ b/{path}", text
    assert not text.endswith("\n")


def test_commit_stages_adds_changes_and_deletions(git_agent, repo):
    repo.write("a.txt", "one\ntwo\n")
    repo.write("dir/b.txt", "bee\n")
    repo.write("c.txt", "sea\n")
    first = commit(git_agent, "first")
    assert first == {"commit": repo.run("rev-parse", "HEAD").strip(),
                     "message": "first"}
    assert re.fullmatch(r"[0-9a-f]{40}", first["commit"])

    repo.write("a.txt", "one\nTWO\n")
    os.remove(os.path.join(repo.ws, "c.txt"))
    repo.write("d.txt", "dee\n")
    repo.write(".gitignore", "*.log\n")
    repo.write("noise.log", "ignored\n")
    second = commit(git_agent, "second change")
    assert second["message"] == "second change"
    assert repo.run("rev-parse", "HEAD").strip() == second["commit"]
    assert repo.run("rev-parse", "HEAD~1").strip() == first["commit"]
    assert repo.run("log", "-1", "--format=%an|%ae|%cn|%ce|%B") == \
        "User|user@example.com|User|user@example.com|second change\n\n"
    changed = repo.run("show", "--name-status", "--format=", "HEAD").split("\n")
    assert sorted(filter(None, changed)) == \
        ["A\t.gitignore", "A\td.txt", "D\tc.txt", "M\ta.txt"]
    assert repo.run("status", "--porcelain") == ""
    assert sorted(repo.run("ls-files").split()) == \
        [".gitignore", "a.txt", "d.txt", "dir/b.txt"]
    assert repo.run("show", "HEAD:a.txt") == "one\nTWO\n"


def test_commit_uses_the_configured_author(git_agent, repo):
    repo.run("init", "-q")
    repo.run("config", "user.name", "Ada Lovelace")
    repo.run("config", "user.email", "ada@example.org")
    repo.write("x", "x\n")
    c = commit(git_agent, "by ada")
    assert repo.run("log", "-1", "--format=%H|%an|%ae|%cn") == \
        f"{c['commit']}|Ada Lovelace|ada@example.org|Ada Lovelace\n"


def test_commit_with_nothing_changed_is_an_empty_commit(git_agent, repo):
    repo.write("x", "x\n")
    first = commit(git_agent, "first")
    again = git_agent.post("/fastapi/watcher/commit_changes", data=b"")
    assert again.status_code == 200, again.text
    again = again.json()
    assert again["message"] == "Automated commit"
    assert again["commit"] != first["commit"]
    assert repo.run("rev-parse", "HEAD~1").strip() == first["commit"]
    assert repo.run("diff", "--name-only", "HEAD~1", "HEAD") == ""
    assert repo.run("log", "-1", "--format=%s") == "Automated commit\n"


def test_workspace_that_is_not_a_repository_gets_initialised(git_agent, repo):
    repo.write("hello.txt", "hi\n")
    assert not os.path.exists(os.path.join(repo.ws, ".git"))
    r = git_agent.get("/watcher/git_logs")
    assert r.status_code == 200 and r.json() == {"logs": []}
    assert repo.run("rev-parse", "--is-inside-work-tree").strip() == "true"
    assert repo.run("rev-parse", "--show-toplevel").strip() == \
        os.path.realpath(repo.ws)
    c = commit(git_agent, "root")
    assert repo.run("log", "--format=%H").split() == [c["commit"]]


def test_diff_of_the_working_tree_against_head(git_agent, repo):
    repo.write("keep.txt", "".join(f"line {i}\n" for i in range(1, 21)))
    repo.write("gone.txt", "bye\nnow\n")
    commit(git_agent, "base")
    repo.write("keep.txt", "".join(
        f"line {i}\n" if i != 10 else "changed\n" for i in range(1, 21)))
    os.remove(os.path.join(repo.ws, "gone.txt"))
    repo.write("new/untracked.txt", "fresh\nfile")

    d = diff(git_agent)
    assert set(d) == {"keep.txt", "gone.txt", "new/untracked.txt"}
    for path, text in d.items():
        assert_headers(path, text)
        # The agent staged everything: git's view of the same change.
        want = repo.run("diff", "--cached", "-U3", "HEAD", "--", path)
        assert hunks(text) == hunks(want), path
    assert d["gone.txt"].split("\n")[2] == "@@ -1,2 +0,0 @@"
    assert d["new/untracked.txt"] == (
        "--- a/new/untracked.txt\n+++ b/new/untracked.txt\n@@ -0,0 +1,2 @@\n"
        "+fresh\n+file\n\\ No newline at end of file")
    assert sorted(repo.run("diff", "--cached", "--name-only").split()) == \
        ["gone.txt", "keep.txt", "new/untracked.txt"]


def test_diff_before_the_first_commit_is_against_the_empty_tree(git_agent, repo):
    repo.write("a.txt", "a\nb\n")
    d = diff(git_agent)
    assert d == {"a.txt": "--- a/a.txt\n+++ b/a.txt\n@@ -0,0 +1,2 @@\n+a\n+b"}


def test_diff_between_two_commits_matches_git(git_agent, repo):
    repo.write("f.py", "".join(f"value_{i} = {i}\n" for i in range(40)))
    repo.write("same.txt", "unchanged\n")
    repo.write("old.txt", "to be renamed\n")
    a = commit(git_agent, "A")["commit"]
    lines = [f"value_{i} = {i}\n" for i in range(40)]
    lines[1] = "value_1 = 'one'\n"
    lines[20:22] = ["inserted\n"]
    lines[-1] = lines[-1].rstrip("\n")
    repo.write("f.py", "".join(lines))
    os.rename(os.path.join(repo.ws, "old.txt"), os.path.join(repo.ws, "new.txt"))
    b = commit(git_agent, "B")["commit"]

    d = diff(git_agent, a, b)
    # A rename is what git shows without rename detection: delete + add.
    assert set(d) == {"f.py", "old.txt", "new.txt"}
    for path, text in d.items():
        assert_headers(path, text)
        want = repo.run("diff", "--no-renames", "-U3", a, b, "--", path)
        assert hunks(text) == hunks(want), path
    assert len([h for h in hunks(d["f.py"]) if h.startswith("@@")]) == 3
    # Any name git understands for a commit works, the other way round too.
    assert diff(git_agent, "HEAD~1", "HEAD") == d
    assert diff(git_agent, b[:10], a[:10])["f.py"] != d["f.py"]
    assert diff(git_agent, a, a) == {}


def test_diff_needs_both_commits_or_neither(git_agent, repo):
    repo.write("x", "x\n")
    c = commit(git_agent)["commit"]
    for body in ({"commit_a": c}, {"commit_b": c},
                 {"commit_a": c, "commit_b": None}):
        r = git_agent.post("/watcher/generate_diff", body)
        assert r.status_code == 400, body
        assert "commit_a" in r.json()["detail"]


def test_diff_of_an_unknown_commit(git_agent, repo):
    repo.write("x", "x\n")
    c = commit(git_agent)["commit"]
    for missing in ("0" * 40, "no-such-branch"):
        r = git_agent.post("/watcher/generate_diff",
                           {"commit_a": c, "commit_b": missing})
        assert r.status_code == 404, r.text
        assert missing in r.json()["detail"]
    tree = repo.run("rev-parse", "HEAD^{tree}").strip()
    r = git_agent.post("/watcher/generate_diff",
                       {"commit_a": c, "commit_b": tree})
    assert r.status_code == 400 and "not a commit" in r.json()["detail"]


def test_bad_requests_are_400(git_agent):
    cases = [
        ("/watcher/commit_changes", b"{not json"),
        ("/watcher/commit_changes", b"[]"),
        ("/watcher/commit_changes", b'{"commit_message": 5}'),
        ("/watcher/generate_diff", b'{"commit_a": 1, "commit_b": "HEAD"}'),
        ("/watcher/generate_diff", b'{"commit_a": "HEAD", "commit_b": []}'),
        ("/watcher/generate_diff", b'"HEAD"'),
    ]
    for path, body in cases:
        r = git_agent.post(path, data=body,
                           headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (path, body, r.text)
        assert isinstance(r.json()["detail"], str)
    for limit in ("0", "-1", "abc", "2x"):
        r = git_agent.get("/watcher/git_logs", params={"limit": limit})
        assert r.status_code == 400 and "limit" in r.json()["detail"]


def test_binary_files_are_marked_not_dumped(git_agent, repo):
    repo.write("img.bin", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    d = diff(git_agent)
    assert d == {"img.bin": "--- a/img.bin\n+++ b/img.bin\n"
                            "Binary files a/img.bin and b/img.bin differ"}
    commit(git_agent, "bin")
    repo.write("img.bin", b"\x00changed")
    assert diff(git_agent)["img.bin"].endswith(
        "Binary files a/img.bin and b/img.bin differ")


def test_non_utf8_content_and_names_become_replacement_characters(
        git_agent, repo):
    repo.write("README", "base\n")
    commit(git_agent, "base")
    repo.write("latin1.txt", b"caf\xe9\n")
    with open(os.path.join(repo.ws.encode(), b"name-\xff.txt"), "wb") as f:
        f.write(b"ok\n")
    d = diff(git_agent)
    assert d["latin1.txt"].endswith("@@ -0,0 +1 @@\n+caf\ufffd")
    assert "name-\ufffd.txt" in d
    commit(git_agent, "bytes")
    repo.run(*AUTHOR, "-c", "i18n.commitEncoding=latin1", "commit", "-q",
             "--allow-empty", "-m", b"caf\xe9 au lait")
    logs = git_agent.get("/watcher/git_logs").json()["logs"]
    assert logs[0]["message"] == "caf\ufffd au lait"
    assert logs[1]["diff"]["latin1.txt"].endswith("+caf\ufffd")


def test_git_logs_newest_first_with_dates_and_diffs(git_agent, repo):
    repo.write("a.txt", "1\n")
    first = commit(git_agent, "  first line\n\nbody text\n\n")
    repo.write("a.txt", "1\n2\n")
    second = commit(git_agent, "second")
    repo.write("b.txt", "b\n")
    repo.run("add", "b.txt")
    repo.run(*AUTHOR, "commit", "-q", "-m", "from the shell", env={
        "GIT_AUTHOR_DATE": "2021-03-04T05:06:07+05:30",
        "GIT_COMMITTER_DATE": "2021-03-04T05:06:07+05:30"})
    third = repo.run("rev-parse", "HEAD").strip()

    r = git_agent.get("/watcher/git_logs")
    assert r.status_code == 200
    assert set(r.json()) == {"logs"}
    logs = r.json()["logs"]
    assert [c["commit"] for c in logs] == repo.run("log", "--format=%H").split()
    assert [c["commit"] for c in logs] == [third, second["commit"],
                                           first["commit"]]
    for c in logs:
        assert set(c) == {"commit", "author", "date", "message", "diff"}
    assert [c["author"] for c in logs] == ["Tester", "User", "User"]
    assert [c["message"] for c in logs] == [
        "from the shell", "second", "first line\n\nbody text"]
    git_dates = repo.run("log", "--format=%aI").split()
    assert [c["date"] for c in logs] == git_dates
    for c, d in zip(logs, git_dates):
        assert datetime.datetime.fromisoformat(c["date"]) == \
            datetime.datetime.fromisoformat(d)
    assert logs[0]["date"] == "2021-03-04T05:06:07+05:30"
    assert logs[2]["diff"] == {}
    assert logs[1]["diff"] == {
        "a.txt": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n 1\n+2"}
    assert logs[0]["diff"] == diff(git_agent, second["commit"], third)

    limited = git_agent.get("/fastapi/watcher/git_logs", params={"limit": 2})
    assert limited.json()["logs"] == logs[:2]


def test_git_logs_follow_merges_in_git_log_order(git_agent, repo):
    def cli_commit(message, date):
        repo.run(*AUTHOR, "commit", "-q", "--allow-empty", "-m", message,
                 env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})

    repo.run("init", "-q", "-b", "main")
    cli_commit("root", "2020-01-01T00:00:00+00:00")
    repo.run("checkout", "-q", "-b", "side")
    cli_commit("side 1", "2020-01-02T00:00:00+00:00")
    repo.write("side.txt", "side\n")
    repo.run("add", "side.txt")
    cli_commit("side 2", "2020-01-04T00:00:00+00:00")
    repo.run("checkout", "-q", "main")
    cli_commit("main 1", "2020-01-03T00:00:00+00:00")
    repo.run(*AUTHOR, "merge", "-q", "--no-ff", "-m", "merge side", "side",
             env={"GIT_AUTHOR_DATE": "2020-01-05T00:00:00+00:00",
                  "GIT_COMMITTER_DATE": "2020-01-05T00:00:00+00:00"})
    logs = git_agent.get("/watcher/git_logs").json()["logs"]
    assert [c["commit"] for c in logs] == repo.run("log", "--format=%H").split()
    assert [c["message"] for c in logs] == \
        ["merge side", "side 2", "main 1", "side 1", "root"]
    # A merge's diff is against its first parent: what side brought in.
    assert list(logs[0]["diff"]) == ["side.txt"]


def test_git_logs_of_a_shallow_clone(git_agent, repo, tmp_workspace):
    src = Repo(os.path.join(os.path.dirname(tmp_workspace), "src"), repo.env["HOME"])
    os.mkdir(src.ws)
    src.run("init", "-q")
    for i in range(3):
        src.write("f.txt", f"{i}\n")
        src.run("add", "f.txt")
        src.run(*AUTHOR, "commit", "-q", "-m", f"upstream {i}")
    repo.run("clone", "-q", "--depth", "1", "file://" + src.ws, ".")
    logs = git_agent.get("/watcher/git_logs").json()["logs"]
    assert [(c["message"], c["diff"]) for c in logs] == [("upstream 2", {})]
    repo.write("f.txt", "mine\n")
    mine = commit(git_agent, "mine")
    logs = git_agent.get("/watcher/git_logs").json()["logs"]
    assert [c["commit"] for c in logs] == repo.run("log", "--format=%H").split()
    assert [c["commit"] for c in logs][0] == mine["commit"]
    assert logs[0]["diff"] == {
        "f.txt": "--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-2\n+mine"}
    assert logs[1]["diff"] == {}


def test_commit_as_the_run_as_user_keeps_its_git_usable(start_agent, home,
                                                         tmp_workspace):
    # Started as root, the agent runs commands as --run-as; its own git
    # writes must belong to that user too, or the user's git breaks.
    uid = 12345 if os.geteuid() == 0 else os.geteuid()
    os.chmod(os.path.dirname(tmp_workspace), 0o755)
    os.chown(tmp_workspace, uid, uid)
    a = start_agent("--run-as", f"{uid}:{uid}", env={"HOME": home})
    repo = Repo(tmp_workspace, home)
    repo.write("a.txt", "a\n")
    os.chown(os.path.join(tmp_workspace, "a.txt"), uid, uid)
    commit(a, "by the agent")
    for dirpath, dirnames, filenames in os.walk(os.path.join(tmp_workspace,
                                                             ".git")):
        for name in dirnames + filenames + ["."]:
            assert os.lstat(os.path.join(dirpath, name)).st_uid == uid, name
    res = a.shell("export HOME=$PWD; echo b > b.txt && git add b.txt && "
                  "git -c user.name=u -c user.email=u@example.com "
                  "commit -q -m 'by the user' && git log --format=%s")
    texts = result_texts(res)
    assert texts["returncode"] == "0", texts
    assert texts["stdout"] == "by the user\nby the agent\n"
    assert commit(a, "agent again")["message"] == "agent again"
    assert [c["message"] for c in a.get("/watcher/git_logs").json()["logs"]] \
        == ["agent again", "by the user", "by the agent"]


def test_health_and_shell_answer_while_a_large_commit_runs(git_agent, repo):
    for i in range(20000):
        repo.write(f"tree/{i // 500:02d}/file{i}.txt", f"content {i}\n")
    objects = os.path.join(repo.ws, ".git", "objects")

    def writing():
        return os.path.isdir(objects) and any(
            len(d) == 2 for d in os.listdir(objects))

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        big = pool.submit(commit, git_agent, "twenty thousand files")
        while not writing():
            assert not big.done(), big.result()
        # The commit is under way on the worker thread: the loop answers.
        assert git_agent.get("/healthz").text == "OK"
        assert result_texts(git_agent.shell("echo alive"))["stdout"] == "alive\n"
        assert not big.done()
        # Queued behind the commit, so it sees it.
        logs = pool.submit(git_agent.get, "/watcher/git_logs",
                           params={"limit": 1})
        sha = big.result(timeout=600)["commit"]
        assert logs.result(timeout=600).json()["logs"][0]["commit"] == sha
    assert repo.run("rev-parse", "HEAD").strip() == sha
    assert len(repo.run("ls-files").split()) == 20000
    assert repo.run("status", "--porcelain") == ""


def test_stopping_the_agent_lets_a_running_commit_finish(git_agent, repo):
    for i in range(5000):
        repo.write(f"tree/{i // 500:02d}/file{i}.txt", f"content {i}\n")
    objects = os.path.join(repo.ws, ".git", "objects")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(git_agent.post, "/watcher/commit_changes",
                              {"commit_message": "interrupted?"})
        while not (os.path.isdir(objects) and any(
                len(d) == 2 for d in os.listdir(objects))):
            assert not pending.done(), pending.result().text
        git_agent.proc.terminate()
        assert git_agent.proc.wait(120) == 0
        try:
            pending.result(timeout=120)
        except Exception:
            pass  # the answer may be lost with the exiting agent
    # No lock left behind, and the commit is whole.
    assert not os.path.exists(os.path.join(repo.ws, ".git", "index.lock"))
    assert repo.run("log", "--format=%s") == "interrupted?\n"
    assert repo.run("status", "--porcelain") == ""
    assert len(repo.run("ls-files").split()) == 5000
