"""The images `make image` built, run from their own root file systems (`make image-test`).

The CSI plugin runs from the CSI image's root (a chroot of the image's root file system, with
/dev/fuse): the suite drives it over its gRPC socket like kubelet does -- publish a dataset
version, read every file byte-exact through the published path, unpublish. The server image
runs `datahub serve --auth` as its own unprivileged user and answers /healthz, the API with a
token and the browser's first page. Both images are checked for what they must not hold
(compilers, test files, benchmark data) and for the commit `datahub --version` names.

They run under `make image-test` only (DATAHUB_TEST_IMAGES=1), which builds the images from
the checkout's commit first; there a missing image or tool is a failure. Plain `make test`
skips them, saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.csi.conftest import CsiEnv, Plugin, make_env, mounts_under, wait_until
from tests.images import put_rows_check
from tests.servers import S3Endpoint

REPO = Path(__file__).resolve().parents[2]
IMAGES_DIR = Path(os.environ.get("DATAHUB_IMAGES_DIR", REPO / "var" / "images"))
STORAGE = [
    "--root",
    str(IMAGES_DIR / "storage"),
    "--runroot",
    str(IMAGES_DIR / "run"),
    "--storage-driver",
    "vfs",
]
CSI_IMAGE = "localhost/datahub-csi:dev"
SERVER_IMAGE = "localhost/datahub-server:dev"
IMAGE_PATH = "/opt/datahub/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

pytestmark = [pytest.mark.slow, pytest.mark.fuse]


def _buildah(*args: str) -> str:
    return subprocess.run(
        ["buildah", *STORAGE, *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def _require(image: str) -> None:
    """Run only under `make image-test`, which builds the images from this commit first: an
    image left from an older commit would say so and fail, so plain `make test` skips them."""
    if os.environ.get("DATAHUB_TEST_IMAGES") != "1":
        pytest.skip(
            "the built images are tested by `make image-test` (it builds them from this commit first)"
        )
    if os.geteuid() != 0:
        pytest.fail("needs root (chroot, mounts)")
    if shutil.which("buildah") is None:
        pytest.fail("buildah is not installed (apt-get install buildah podman debootstrap)")
    probe = subprocess.run(["buildah", *STORAGE, "inspect", "--type", "image", image], capture_output=True)
    if probe.returncode:
        pytest.fail(f"{image} is not built (make image)")


def expected_commit() -> str:
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
    ).stdout
    return head.strip() + ("-dirty" if dirty.strip() else "")


class ImageRoot:
    """A working container of ``image`` (buildah from + mount: with vfs, a plain directory that
    holds the image's root file system). Commands run chrooted into it, each in a mount
    namespace of its own that binds /dev, /proc and the chosen host directories in: the binds
    vanish with the last process of the namespace, even one killed, so nothing of the host
    stays mounted inside var/images (where `rm -rf` would reach it)."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.container = _buildah("from", "--pull-never", image)
        self.path = Path(_buildah("mount", self.container))
        self.config = json.loads(_buildah("inspect", "--type", "image", image))["Docker"]["config"]
        self.binds: list[Path] = []

    def bind(self, source: Path) -> None:
        """``source`` appears at the same path inside the root. A shared ``source`` stays a peer:
        mounts made under it inside show outside, like kubelet's Bidirectional propagation."""
        (self.path / str(source).lstrip("/")).mkdir(parents=True, exist_ok=True)
        self.binds.append(source)

    def run(self, *cmd: str, user: str | None = None, **kwargs) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*cmd, user=user), env=self.env(), **kwargs)

    def command(self, *cmd: str, user: str | None = None) -> list[str]:
        setup = [
            # the mount holding the image root stops propagating: the binds below stay in here
            'mount --make-private "$(findmnt -no TARGET -T "$R")"',
            'mount --rbind /dev "$R/dev"',
            'mount --bind /proc "$R/proc"',
            *(f'mount --bind "{b}" "$R{b}"' for b in self.binds),
            'exec chroot "$@"',
        ]
        script = "set -e; " + "; ".join(setup)
        chroot_args = [*([f"--userspec={user}"] if user else []), str(self.path), *cmd]
        return [
            "unshare",
            "--mount",
            "--propagation",
            "unchanged",
            "--",
            "sh",
            "-c",
            script,
            "sh",
            *chroot_args,
        ]

    def env(self, **extra: str) -> dict[str, str]:
        """The image's own environment (ENV lines), not the test runner's."""
        env = dict(item.split("=", 1) for item in self.config.get("Env") or [])
        return {**env, "PATH": env.get("PATH", IMAGE_PATH), "HOME": "/root", "R": str(self.path), **extra}

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            _buildah("umount", self.container)
        _buildah("rm", self.container)


@contextlib.contextmanager
def image_root(image: str) -> Iterator[ImageRoot]:
    _require(image)
    root = ImageRoot(image)
    try:
        yield root
    finally:
        root.close()


def check_contents(root: ImageRoot) -> None:
    """No compiler, no test files, no benchmark data; the commit it was built from."""
    for tool in ("gcc", "cc", "cpp", "c++", "x86_64-linux-gnu-gcc-12", "ld", "make"):
        found = [d for d in ("usr/bin", "usr/local/bin", "bin") if (root.path / d / tool).exists()]
        assert not found, f"{root.image} holds a compiler/build tool: {tool} in {found}"
    assert not list((root.path / "usr" / "include").glob("python3*")), "Python headers in the image"
    site = next((root.path / "opt" / "datahub" / "lib").glob("python3.*/site-packages"))
    for package in ("datahub", "fuse_adapter", "csi", "labelx"):
        if (site / package).exists():
            assert not list((site / package).rglob("test_*.py")), f"test files in {package}"
    for name in ("tests", "bench", "pytest", "_pytest", "moto", "hypothesis"):
        assert not (site / name).exists(), f"{root.image} holds {name}"
        assert not (root.path / "src" / name).exists(), f"{root.image} holds /src/{name}"
    version = root.run("datahub", "--version", capture_output=True, text=True, timeout=60)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip().endswith(f"(commit {expected_commit()})"), (
        f"{root.image} says {version.stdout.strip()!r}; rebuild it (make image) from this commit"
    )


# ------------------------------------------------------------------------------------ CSI plugin
class ImagePlugin(Plugin):
    """tests/csi's Plugin, but ``python -m csi`` from the image's root and its venv (``env``:
    the plugin's own variables, its Secret's, over the image's ENV)."""

    def __init__(
        self,
        image: ImageRoot,
        root: Path,
        config_path: Path,
        *,
        env: dict[str, str] | None = None,
        mode: str = "all",
    ) -> None:
        super().__init__(root, config_path, env=env, mode=mode)
        self.image = image

    def start(self) -> ImagePlugin:
        import grpc

        cmd = self.image.command(
            "python", "-m", "csi", "--endpoint", f"unix://{self.socket}", "--node-id", "image-node",
            "--state-dir", str(self.state_dir), "--config", str(self.config_path),
            "--check-interval", str(self.check_interval), "--mount-timeout", "90", "--unmount-timeout", "120", "-v",
            "--mode", self.mode, "--kubelet-dir", str(self.kubelet_dir),
        )  # fmt: skip
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, cwd="/", env=self.image.env(**self.env))
        self.channel = grpc.insecure_channel(f"unix://{self.socket}")
        wait_until(self._ready, 60, f"plugin ready (log: {self.log_path})", interval=0.1)
        return self


@pytest.fixture(scope="module")
def csi_root() -> Iterator[ImageRoot]:
    with image_root(CSI_IMAGE) as root:
        yield root


@pytest.fixture(scope="module")
def shared_env(tmp_path_factory: pytest.TempPathFactory, moto_endpoint: S3Endpoint) -> Iterator[CsiEnv]:
    """tests/csi's dataset (two versions in moto), under a directory that is its own shared mount."""
    env = make_env(tmp_path_factory.mktemp("csi-image"), moto_endpoint)
    subprocess.run(["mount", "--bind", str(env.root), str(env.root)], check=True)
    subprocess.run(["mount", "--make-shared", str(env.root)], check=True)
    try:
        yield env
    finally:
        for point in mounts_under(env.root):
            subprocess.run(["umount", "-l", point], capture_output=True)
        subprocess.run(["umount", "-l", str(env.root)], capture_output=True)


def test_csi_image_holds_no_build_tools_and_names_its_commit(csi_root: ImageRoot) -> None:
    check_contents(csi_root)
    assert csi_root.config.get("User", "") in ("", "root", "0")  # the node plugin mounts: root, privileged


def test_csi_plugin_from_the_image_publishes_reads_byte_exact_and_unpublishes(
    csi_root: ImageRoot, shared_env: CsiEnv
) -> None:
    csi_root.bind(shared_env.root)
    plugin = ImagePlugin(csi_root, shared_env.root, shared_env.config_path)
    try:
        plugin.start()
        assert os.readlink(f"/proc/{plugin.proc.pid}/root") == str(csi_root.path)  # the image's python
        for version, files in sorted(shared_env.files.items()):
            target = shared_env.target(f"pod-v{version}")
            plugin.publish(
                target, {"dataset": "imgs", "version": str(version)}, volume_id=f"v{version}", readonly=True
            )
            assert target in mounts_under(shared_env.root)  # seen outside the image's root
            got = {str(p.relative_to(target)): p.read_bytes() for p in Path(target).rglob("*") if p.is_file()}
            assert got == files
            plugin.unpublish(target, volume_id=f"v{version}")
            assert target not in mounts_under(shared_env.root)
            assert not Path(target).exists() or not any(Path(target).iterdir())
        assert plugin.state() == []
        log = plugin.log_path.read_text(errors="replace")
        assert "published v1" in log and "Traceback" not in log, log[-3000:]
    finally:
        plugin.teardown()


# ------------------------------------------------------------------------- the catalog's C inserts
@pytest.mark.parametrize("fixture", ["csi_root", "server_root"])
def test_a_commit_in_the_image_inserts_its_put_lines_by_c(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    """The image build compiles datahub/catalog/_put_rows.c (scripts/build_put_rows.sh, as
    `make install` does): a first version's plain puts are inserted by C in the image, not by
    the json_each fallback, and the version holds exactly the committed rows."""
    root: ImageRoot = request.getfixturevalue(fixture)
    user = root.config.get("User") or None
    home = Path("/tmp/put-rows-check")
    work = root.path / home.relative_to("/")
    work.mkdir()
    shutil.copy(Path(__file__).with_name("put_rows_check.py"), work)
    if user:
        uid, _, gid = user.partition(":")
        for path in (work, work / "put_rows_check.py"):
            os.chown(path, int(uid), int(gid or uid))
    env = root.env(DATAHUB_HOME=str(home), HOME=str(home))
    cmd = f"cd {home} && exec python put_rows_check.py {home}"
    run = subprocess.run(
        root.command("sh", "-c", cmd, user=user), env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["built"], f"{root.image} has no datahub.catalog._put_rows: commits take the json_each path"
    inserts = got["inserts"]
    assert inserts and None not in inserts, f"C did not insert every chunk (None: json_each ran): {inserts}"
    assert sum(inserts) == put_rows_check.LINES
    assert got["rows"] == [list(put_rows_check.record(i).values()) for i in range(put_rows_check.LINES)]


# ---------------------------------------------------------------------------------------- server
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str | None = None, data: bytes | None = None, method: str = "") -> tuple[int, str]:
    request = urllib.request.Request(url, data=data, method=method or ("POST" if data else "GET"))
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if data:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture(scope="module")
def server_root() -> Iterator[ImageRoot]:
    with image_root(SERVER_IMAGE) as root:
        yield root


def test_server_image_holds_no_build_tools_runs_as_non_root_and_names_its_commit(
    server_root: ImageRoot,
) -> None:
    check_contents(server_root)
    user = server_root.config.get("User", "")
    assert user and user.split(":")[0] not in ("root", "0"), user


def token(root: ImageRoot, home: str, principal: str, *, admin: bool = False) -> str:
    """A token made by `datahub token create` in the server image, as its user (the command
    docs/kubernetes.md runs in a server pod)."""
    cmd = f"cd {home} && datahub --json token create --principal {principal}" + (" --admin" if admin else "")
    made = subprocess.run(
        root.command("sh", "-c", cmd, user=root.config["User"]),
        env=root.env(DATAHUB_HOME=home, HOME=home), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return json.loads(made.stdout)["token"]


@contextlib.contextmanager
def serving(root: ImageRoot, home: str) -> Iterator[str]:
    """`datahub serve --auth` from the server image as its user, its state under ``home``; yields
    its URL once /healthz answers, and stops it (its log's end in the error if it exits)."""
    port = _free_port()
    cmd = f"cd {home} && exec datahub serve --auth --host 127.0.0.1 --port {port}"
    log_path = root.path / "tmp" / "serve.log"
    env = root.env(DATAHUB_HOME=home, HOME=home)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            root.command("sh", "-c", cmd, user=root.config["User"]), env=env, stdout=log, stderr=log
        )
    url = f"http://127.0.0.1:{port}"
    try:

        def up() -> bool:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            with contextlib.suppress(OSError):
                return _get(url + "/healthz")[0] == 200
            return False

        wait_until(up, 90, "datahub serve answers /healthz", interval=0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_server_image_serves_healthz_the_api_with_a_token_and_the_browser(server_root: ImageRoot) -> None:
    user = server_root.config["User"]
    home = server_root.config.get("WorkingDir") or "/var/lib/datahub"
    ci = token(server_root, home, "ci", admin=True)
    with serving(server_root, home) as url:
        assert _get(url + "/v1/datasets")[0] == 401  # --auth: no token, no data
        status, body = _get(url + "/v1/whoami", ci)
        assert status == 200 and json.loads(body)["principal"] == "ci", body
        status, body = _get(url + "/v1/datasets", ci, json.dumps({"name": "image-check"}).encode())
        assert status == 201, body
        status, body = _get(url + "/", ci)
        assert status == 200 and "image-check" in body and "<html" in body.lower(), body[:500]
        assert _get(url + "/labelx/")[0] in (200, 303, 307, 401)  # LabelX is mounted
    # the server wrote its state as its own user, nothing as root
    owners = {p.stat().st_uid for p in (server_root.path / home.lstrip("/")).rglob("*")}
    assert owners == {int(user.split(":")[0])}, owners
