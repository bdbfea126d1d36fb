"""Every download pinned (docs/security.md): the service venvs' hashed locks, for real.

A PEP 503 index on 127.0.0.1 serves wheels built here (support.wheels) with their `#sha256=` fragments; real pip
resolves (labwright.locks), downloads the wheelhouse against the lock (labwright.wheelhouse) and installs from it
with --require-hashes into a real venv whose pip is the one `python -m venv` bundles (a guest's). A wheel changed
on the index, or in the wheelhouse, after its hash was published is refused by pip with its hash mismatch, and
labwright says so in one line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from labwright.deploys.common import lock_of, pip_install, pip_requirements, pip_source
from labwright.errors import BadInput, OperationFailed, SafetyCheckFailed
from labwright.locks import LOCK_NAME, cached_lock, check_lock, make_lock
from labwright.wheelhouse import download_wheelhouse
from support.simple_index import Index, serve
from support.wheels import write_wheel

PY = f"{sys.version_info.major}.{sys.version_info.minor}"
PLATFORMS = ["manylinux_2_28_x86_64"]


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    with serve(tmp_path / "index") as served:
        yield served


def publish_service(index: Index, tmp_path: Path, *, dep_hash: bool = True) -> None:
    build = tmp_path / "build"
    index.publish(write_wheel(build, "lwsvc", "1.0.0", {"lwsvc/__init__.py": b"import lwdep\n"},
                              requires=["lwdep>=1.0"], tag="py3-none-any"))
    index.publish(write_wheel(build, "lwdep", "1.2.0", {"lwdep/__init__.py": b"VALUE = 1\n"}, tag="py3-none-any"),
                  with_hash=dep_hash)


def test_the_lock_records_the_sha256_the_index_publishes_for_the_whole_resolution(index, tmp_path):
    publish_service(index, tmp_path)
    text = make_lock(["lwsvc==1.0.0"], PY, PLATFORMS, index.url)
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == [f"lwdep==1.2.0 --hash=sha256:{index.published['lwdep-1.2.0-py3-none-any.whl']}",
                     f"lwsvc==1.0.0 --hash=sha256:{index.published['lwsvc-1.0.0-py3-none-any.whl']}"]
    assert index.url in text.splitlines()[0]


def test_a_file_the_index_publishes_no_sha256_for_is_refused_in_one_line(index, tmp_path):
    """pip's own report would hash the file on arrival: labwright refuses to pin what the index does not."""
    publish_service(index, tmp_path, dep_hash=False)
    with pytest.raises(OperationFailed) as info:
        make_lock(["lwsvc==1.0.0"], PY, PLATFORMS, index.url)
    line = str(info.value)
    assert line.startswith("lwdep-1.2.0-py3-none-any.whl: ") and "publishes no sha256" in line and "\n" not in line


def test_the_wheelhouse_comes_with_its_lock_and_a_file_changed_on_the_index_is_refused(index, tmp_path):
    publish_service(index, tmp_path)
    house = download_wheelhouse(["lwsvc==1.0.0"], PY, tmp_path / "house", index_url=index.url)
    assert sorted(p.name for p in house.glob("*.whl")) == ["lwdep-1.2.0-py3-none-any.whl",
                                                           "lwsvc-1.0.0-py3-none-any.whl"]
    assert len(check_lock(house / LOCK_NAME)) == 2 and (house / ".complete").is_file()
    # idempotent: a second call reuses it
    before = {p.name: p.stat().st_mtime_ns for p in house.iterdir()}
    assert download_wheelhouse(["lwsvc==1.0.0"], PY, house, index_url=index.url) == house
    assert {p.name: p.stat().st_mtime_ns for p in house.iterdir()} == before
    # the index's file changes after it published the sha256: pip refuses it, labwright says so in one line
    index.tamper("lwdep-1.2.0-py3-none-any.whl")
    with pytest.raises(SafetyCheckFailed) as info:
        download_wheelhouse(["lwsvc==1.0.0"], PY, tmp_path / "house2", index_url=index.url)
    line = str(info.value)
    assert line.startswith("lwdep") and f"not the {index.published['lwdep-1.2.0-py3-none-any.whl']} " in line
    assert "tampered" in line and "\n" not in line
    assert not (tmp_path / "house2" / ".complete").exists()


@pytest.fixture(scope="module")
def guest_venv(tmp_path_factory) -> Path:
    """A venv with the pip `python -m venv` bundles, as a guest's service venv has."""
    path = tmp_path_factory.mktemp("guest") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, capture_output=True)
    return path


@pytest.fixture(scope="module")
def service_house(tmp_path_factory) -> Path:
    """lwsvc's wheelhouse with its lock, downloaded by real pip once per module from an index of its own (the tests
    that check the download itself make theirs)."""
    root = tmp_path_factory.mktemp("service-house")
    with serve(root / "index") as index:
        publish_service(index, root)
        return download_wheelhouse(["lwsvc==1.0.0"], PY, root / "house", index_url=index.url)


@pytest.fixture
def house(service_house: Path, tmp_path: Path) -> Path:
    """This test's own copy of the module's wheelhouse, free to be spoilt."""
    return Path(shutil.copytree(service_house, tmp_path / "house"))


def run_install(venv: Path, house: Path) -> subprocess.CompletedProcess[str]:
    args = pip_requirements(str(house), "", "'lwsvc==1.0.0'")
    line = pip_install(str(venv / "bin" / "pip"), args, "lwsvc==1.0.0", str(house), "lwsvc_find_links", where="guest")
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1"}
    return subprocess.run(["sh", "-c", line], capture_output=True, text=True, env=env)


def test_the_service_venv_installs_from_the_lock_and_refuses_a_tampered_wheel(house, tmp_path, guest_venv):
    args = pip_requirements(str(house), "", "'lwsvc==1.0.0'")
    assert args == f"--no-index --find-links {house} --require-hashes -r {house}/{LOCK_NAME}"
    # a wheel in the wheelhouse swapped after the lock was made: pip's hash mismatch, then labwright's one line
    wheel = house / "lwdep-1.2.0-py3-none-any.whl"
    good = wheel.read_bytes()
    wheel.write_bytes(write_wheel(tmp_path / "evil", "lwdep", "1.2.0", {"lwdep/__init__.py": b"VALUE = 666\n"},
                                  tag="py3-none-any").read_bytes())
    refused = run_install(guest_venv, house)
    assert refused.returncode == 1
    lines = refused.stderr.strip().splitlines()
    assert "DO NOT MATCH THE HASHES" in refused.stderr and "lwdep" in refused.stderr
    assert lines[-1].startswith("labwright: cannot install lwsvc==1.0.0 from ") and "hashed lock" in lines[-1]
    assert "tampered" in lines[-1] and "lwsvc_find_links" in lines[-1]
    check = subprocess.run([str(guest_venv / "bin" / "python"), "-c", "import lwsvc"], capture_output=True)
    assert check.returncode != 0  # nothing installed
    # the genuine file back: installed, and a second run changes nothing
    wheel.write_bytes(good)
    for _ in range(2):
        done = run_install(guest_venv, house)
        assert done.returncode == 0 and done.stderr == "", done.stderr
    value = subprocess.run([str(guest_venv / "bin" / "python"), "-c", "import lwdep; print(lwdep.VALUE)"],
                           capture_output=True, text=True)
    assert value.stdout.strip() == "1"


def test_a_requirement_outside_the_lock_is_refused_by_pip(tmp_path, house):
    """--require-hashes: a wheelhouse whose lock misses a dependency installs nothing."""
    lock = house / LOCK_NAME
    lock.write_text("".join(line + "\n" for line in lock.read_text().splitlines() if not line.startswith("lwdep")))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    refused = run_install(venv, house)
    assert refused.returncode == 1 and "--require-hashes mode" in refused.stderr, refused.stderr
    assert refused.stderr.strip().splitlines()[-1].startswith("labwright: cannot install lwsvc==1.0.0 from ")
    assert subprocess.run([str(venv / "bin" / "python"), "-c", "import lwsvc"], capture_output=True).returncode


_HOSTS = st.from_regex(r"[a-z][a-z0-9-]{0,12}(\.[a-z0-9-]{1,8}){0,2}|10\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}",
                       fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(host=_HOSTS, named=st.one_of(st.none(), st.just(""), _HOSTS), port=st.integers(1, 65535))
def test_plain_http_is_trusted_only_when_its_host_is_named(host, named, port):
    """Property: a plain http:// wheelhouse is refused in one line naming the URL and the data key unless
    pip_trusted_host names exactly its host; https and directories never carry --trusted-host."""
    url = f"http://{host}:{port}/wheels/"
    trusted = named if named is not None else ""
    if trusted == host:
        args = pip_source(url, "", trusted)
        assert args.endswith(f"--trusted-host {host}") and args.count("--trusted-host") == 1
    else:
        with pytest.raises(BadInput) as info:
            pip_source(url, "", trusted)
        line = str(info.value)
        assert line.startswith(url) and f"pip_trusted_host={host}" in line and "\n" not in line
    assert "--trusted-host" not in pip_source(f"https://{host}:{port}/wheels/", "", trusted)
    assert "--trusted-host" not in pip_source("/mnt/wheels", "", trusted)
    assert lock_of(url) == f"http://{host}:{port}/wheels/{LOCK_NAME}"


_NAME = st.from_regex(r"[a-z][a-z0-9_-]{0,10}", fullmatch=True)
_SHA = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)


@settings(max_examples=60, deadline=None)
@given(name=_NAME, sha=_SHA, spoil=st.sampled_from(["no-hash", "range", "short-hash", "no-version", "empty"]))
def test_a_lock_line_without_an_exact_pin_and_a_sha256_is_refused_in_one_line(tmp_path_factory, name, sha, spoil):
    good = f"{name}==1.0 --hash=sha256:{sha}"
    bad = {"no-hash": f"{name}==1.0", "range": f"{name}>=1.0 --hash=sha256:{sha}",
           "short-hash": f"{name}==1.0 --hash=sha256:{sha[:40]}", "no-version": f"{name} --hash=sha256:{sha}",
           "empty": ""}[spoil]
    path = tmp_path_factory.mktemp("lock") / LOCK_NAME
    path.write_text(f"# a lock\n{good}\n{bad}\n")
    if spoil == "empty":
        assert check_lock(path) == [good]
        path.write_text("# nothing\n")
    with pytest.raises(BadInput) as info:
        check_lock(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


def test_the_wheelhouse_command_makes_any_service_wheelhouse_with_its_lock(index, tmp_path, capsys):
    """`labwright wheelhouse requirements` (Kokoro's, the pipelines server's; was `python -m labwright.wheelhouse`):
    requirements from -r files and words; a pip option in the file is refused in one line, exit 2, nothing written."""
    from labwright.cli import main as cli_main

    def main(args: list[str]) -> int:
        return cli_main(["wheelhouse", "requirements", *args])

    publish_service(index, tmp_path)
    requirements = tmp_path / "requirements-minimum.txt"
    requirements.write_text("# the pipelines server's\nlwsvc==1.0.0  # pinned\n\n")
    out = tmp_path / "pipelines-wheels"
    assert main(["--python", PY, "--out", str(out), "--index-url", index.url, "-r", str(requirements)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert [line.split("==")[0] for line in check_lock(out / LOCK_NAME)] == ["lwdep", "lwsvc"]
    requirements.write_text("--extra-index-url http://elsewhere/simple\nlwsvc==1.0.0\n")
    assert main(["--python", PY, "--out", str(tmp_path / "other"), "--index-url", index.url, "-r",
                 str(requirements)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a pip option" in err and not (tmp_path / "other").exists()


@pytest.mark.parametrize("service", ["litellm", "kokoro", "openwebui"])
def test_a_plain_http_wheelhouse_is_refused_by_the_deploy_before_the_host_is_touched(service):
    """Through pyinfra (`--dry @local`): one line naming the data key, the URL and pip_trusted_host; with the host
    named, that check passes."""
    repo = Path(__file__).resolve().parents[3]
    pyinfra = Path(sys.executable).parent / "pyinfra"
    url = "http://127.0.0.1:9/"  # loopback, nothing listening: never a made-up LAN host

    def run(*extra: str) -> str:
        result = subprocess.run([str(pyinfra), "-y", "--dry", "@local", f"deploys/{service}.py", "--data",
                                 f"{service}_find_links={url}", "--data", f"engine={service}", *extra],
                                cwd=repo, capture_output=True, text=True, timeout=120)
        return result.stdout + result.stderr

    output = run()
    assert f"{service}_find_links: {url} is plain HTTP" in output and "pip_trusted_host=127.0.0.1" in output, output
    assert "Traceback" not in output
    assert "is plain HTTP" not in run("--data", "pip_trusted_host=127.0.0.1")


def test_a_lock_from_the_index_and_an_extra_index_is_made_once_and_kept(tmp_path):
    """The deploys' path without a wheelhouse (common.index_lock): the lock made on this machine from what each index
    publishes (the dependency from the extra one, as pip finds it), cached: a second deploy asks no index."""
    with serve(tmp_path / "main") as main, serve(tmp_path / "extra") as extra:
        build = tmp_path / "build"
        main.publish(write_wheel(build, "lwsvc", "1.0.0", {"lwsvc/__init__.py": b""}, requires=["lwdep>=1.0"],
                                 tag="py3-none-any"))
        extra.publish(write_wheel(build, "lwdep", "1.2.0", {"lwdep/__init__.py": b""}, tag="py3-none-any"))
        lock = cached_lock(["lwsvc==1.0.0"], PY, PLATFORMS, main.url, (extra.url,), root=tmp_path / "locks")
        lines = check_lock(lock)
        assert lines == [f"lwdep==1.2.0 --hash=sha256:{extra.published['lwdep-1.2.0-py3-none-any.whl']}",
                         f"lwsvc==1.0.0 --hash=sha256:{main.published['lwsvc-1.0.0-py3-none-any.whl']}"]
    # both indexes gone: the kept lock answers, unchanged
    again = cached_lock(["lwsvc==1.0.0"], PY, PLATFORMS, main.url, (extra.url,), root=tmp_path / "locks")
    assert again == lock and check_lock(again) == lines


def test_index_lock_puts_the_lock_made_for_the_guests_python_and_installs_from_it_alone(index, tmp_path, monkeypatch):
    """common.index_lock, the deploys' step without a wheelhouse: the guest's CPython asked (a fact), the lock made
    here, put on the guest root-owned, pip's words `--require-hashes -r DEST`; an answer that is no Python version
    is one line."""
    from pyinfra.api.exceptions import DeployError
    from pyinfra.operations import files

    import labwright.deploys.common as common
    import labwright.locks as locks

    publish_service(index, tmp_path)
    monkeypatch.setenv("LABWRIGHT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(locks, "PYPI_SIMPLE", index.url)
    answers = {"python": f"{PY}.2"}

    class Guest:
        name = "@lxd/gw"
        data: dict = {}

        def get_fact(self, fact, **kwargs):
            assert kwargs == {"command": common.GUEST_PYTHON}
            return answers["python"]

    put: list[dict] = []
    monkeypatch.setattr(common, "host", Guest())
    monkeypatch.setattr(files, "put", lambda **kwargs: put.append(kwargs))
    args = common.index_lock(["lwsvc==1.0.0"], "", "/var/lib/labwright/locks/svc.lock", "lwsvc==1.0.0")
    assert args == "--require-hashes -r /var/lib/labwright/locks/svc.lock"
    assert put[0]["dest"] == "/var/lib/labwright/locks/svc.lock" and put[0]["user"] == "root"
    lines = check_lock(Path(put[0]["src"]))
    assert [line.split(" ")[0] for line in lines] == ["lwdep==1.2.0", "lwsvc==1.0.0"]
    answers["python"] = "Python not found"
    with pytest.raises(DeployError) as info:
        common.index_lock(["lwsvc==1.0.0"], "", "/x.lock", "lwsvc")
    assert "not a CPython 3 version" in str(info.value) and "\n" not in str(info.value)


def test_a_find_links_page_with_hashes_can_give_a_file_and_a_local_directory_cannot(tmp_path, monkeypatch):
    """The Open WebUI wheelhouse's --torch-find-links (PIP_FIND_LINKS): a page that publishes `#sha256=` pins the
    file it gives (PyTorch's CPU torch page does); the same file from a local directory has no publisher: refused."""
    build = tmp_path / "build"
    with serve(tmp_path / "main") as main, serve(tmp_path / "links") as links:
        main.publish(write_wheel(build, "lwsvc", "1.0.0", {"lwsvc/__init__.py": b""}, requires=["lwdep>=1.0"],
                                 tag="py3-none-any"))
        dep = write_wheel(build, "lwdep", "1.2.0", {"lwdep/__init__.py": b""}, tag="py3-none-any")
        links.publish(dep)
        monkeypatch.setenv("PIP_FIND_LINKS", f"{links.url}lwdep/")
        text = make_lock(["lwsvc==1.0.0"], PY, PLATFORMS, main.url)
        assert f"lwdep==1.2.0 --hash=sha256:{links.published[dep.name]}" in text
        local = tmp_path / "local-links"
        local.mkdir()
        shutil.copy(dep, local / dep.name)
        monkeypatch.setenv("PIP_FIND_LINKS", str(local))
        with pytest.raises(OperationFailed) as info:
            make_lock(["lwsvc==1.0.0"], PY, PLATFORMS, main.url)
        assert str(info.value).startswith(f"{dep.name}: ") and "not a local directory" in str(info.value)


def test_a_requirements_file_given_to_the_wheelhouse_is_locked_line_by_line(index, tmp_path):
    """download_wheelhouse(["-r", FILE]) (the pipelines server's requirements-minimum.txt): its lines are locked."""
    publish_service(index, tmp_path)
    requirements = tmp_path / "requirements-minimum.txt"
    requirements.write_text("lwsvc==1.0.0\n")
    house = download_wheelhouse(["-r", str(requirements)], PY, tmp_path / "house", index_url=index.url)
    assert [line.split("==")[0] for line in check_lock(house / LOCK_NAME)] == ["lwdep", "lwsvc"]


def test_a_plain_http_wheelhouse_named_as_trusted_installs_from_its_lock_over_http(index, tmp_path, service_house):
    """The lab's way (a wheelhouse served on the bridge): pip reads the lock itself over http from the trusted host
    and installs with --require-hashes; a wheel swapped on that server is refused."""
    house = Path(shutil.copytree(service_house, index.root / "house"))
    url = index.url.replace("/simple/", "/house/")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    args = pip_requirements(url, "", "'lwsvc==1.0.0'", trusted_host="127.0.0.1")
    assert args.endswith(f"--trusted-host 127.0.0.1 --require-hashes -r {url}{LOCK_NAME}")
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INPUT": "1"}

    def install() -> subprocess.CompletedProcess[str]:
        line = pip_install(str(venv / "bin" / "pip"), args, "lwsvc==1.0.0", url, "lwsvc_find_links", where="guest")
        return subprocess.run(["sh", "-c", line], capture_output=True, text=True, env=env)

    wheel = house / "lwsvc-1.0.0-py3-none-any.whl"
    good = wheel.read_bytes()
    wheel.write_bytes(good + b"\0")
    refused = install()
    assert refused.returncode == 1 and "hashed lock" in refused.stderr.strip().splitlines()[-1], refused.stderr
    wheel.write_bytes(good)
    done = install()
    assert done.returncode == 0, done.stderr
