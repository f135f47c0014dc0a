"""The image store the crun backend runs sandboxes from (tools/image-store):
an image built by Docker, imported once into a store of the test's own,
runs as a sandbox with what its layers say, deletions and replaced
directories included (Docker's whiteouts become overlayfs's); importing
again the same image does nothing, a rebuilt one replaces its record; a
missing image is a clear error naming the tool."""
import json
import os
import subprocess

import pytest

from sandboxd_fixtures import (IMAGE_STORE, docker, minimal_tag,  # noqa: F401
                               scratch, start_sandboxd, write_types)

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="importing needs root")

# A directory made in one layer and replaced in the next (an opaque
# directory), a file of the base image deleted (a whiteout).
DOCKERFILE = """FROM agentscope/runtime-sandbox-minimal:{tag}
RUN ["/bin/busybox", "sh", "-c", "mkdir -p /data/old && echo old > /data/old/f && echo gone > /data/gone"]
RUN ["/bin/busybox", "sh", "-c", "rm -rf /data && mkdir /data && echo {word} > /data/only && rm /bin/ls"]
"""


def build(image, tag, word):
    r = subprocess.run(["docker", "build", "-q", "-t", image, "-"],
                       input=DOCKERFILE.format(tag=tag, word=word),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr


def store(path, *args):
    return subprocess.run([IMAGE_STORE, "--store", path, *args],
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def test_image(minimal_tag):
    image = f"agentscope/runtime-sandbox-storetest:{minimal_tag}"
    build(image, minimal_tag, "new")
    yield image
    docker("rmi", "-f", image, check=False)


def test_an_imported_image_runs_with_its_layers(start_sandboxd, scratch,
                                                test_image):
    d = scratch("sbxd-store-")
    path = os.path.join(d, "store")
    r = store(path, "import", test_image)
    assert r.returncode == 0, r.stderr
    assert "imported" in r.stdout
    r = store(path, "import", test_image)
    assert "up to date" in r.stdout, r.stdout
    types = write_types(d, {"storetest": {"from": "minimal",
                                          "image": test_image}})
    s = start_sandboxd(args=["--types", types],
                       env={"CONTAINER_DEPLOYMENT": "crun",
                            "SANDBOXD_IMAGE_STORE": path})
    name = s.create("storetest")
    out = s.shell(name, "ls -A /data; cat /data/only; "
                        "test -e /bin/ls || echo no-ls")["stdout"]
    assert out == "only\nnew\nno-ls\n"

    # Rebuilt with other content: imported again, its record replaced;
    # the layers it shares are not unpacked again.
    build(test_image, test_image.split(":")[1], "newer")
    r = store(path, "import", test_image)
    assert "1 of" in r.stdout, r.stdout
    rec = os.path.join(path, "images",
                       test_image.replace("/", "%2F") + ".json")
    with open(rec) as f:
        layers = json.load(f)["layers"]
    name = s.create("storetest")
    assert s.shell(name, "cat /data/only")["stdout"] == "newer\n"
    assert len(os.listdir(os.path.join(path, "layers"))) == len(layers) + 1


def test_a_missing_image_says_how_to_import_it(start_sandboxd, scratch):
    d = scratch("sbxd-store-")
    path = os.path.join(d, "store")
    assert store(path, "list").returncode == 0
    s = start_sandboxd(env={"CONTAINER_DEPLOYMENT": "crun",
                            "SANDBOXD_IMAGE_STORE": path})
    r = s.post("/v1/sandboxes", {"type": "minimal"})
    assert r.status_code == 500, r.text
    detail = r.json()["detail"]
    assert "is not in the image store" in detail, detail
    assert "tools/image-store import" in detail, detail
    # The store's path is the operator's: clients read its setting.
    assert path not in detail and "$SANDBOXD_IMAGE_STORE" in detail
    assert s.containers() == {}
