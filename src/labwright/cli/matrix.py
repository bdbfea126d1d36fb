"""`labwright matrix`: Wheel compatibility matrix: resolve and check engine stacks (torch, CUDA, flash-attn ...)."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import typer
from packaging.version import Version

from labwright.cli import vocab
from labwright.errors import BadInput, OperationFailed
from labwright.matrix import inputs, outside, registry
from labwright.matrix.check import BROKEN, UNKNOWN, check_requirements, read_requirement_lines
from labwright.matrix.load import load_matrix, matrix_dir, read_components
from labwright.matrix.refresh import KINDS
from labwright.matrix.refresh import refresh as refresh_listing
from labwright.matrix.resolve import Resolution, StackRequest, resolve_stack
from labwright.matrix.stacks import compare_with_seed, get_stack, request_for, short_label
from labwright.matrix.wheelname import platform_matches, python_matches
from labwright.ui import stdout, table

NAME = "matrix"
HELP = "Wheel compatibility matrix: resolve and check engine stacks (torch, CUDA, flash-attn ...)."

app = typer.Typer(no_args_is_help=True, help=HELP)


class StackRefused(OperationFailed):
    """The requested stack cannot be built from the known wheels: exit 1 (the reasons were printed)."""


class PinsBroken(OperationFailed):
    """Some pinned wheels were built for another torch/CUDA/Python: exit 1 (one line each was printed)."""


@app.command()
def refresh(
    listing: Path = typer.Option(None, "--from", help="A listing: prebuilt markdown, pip index HTML or a URL list "
                                                      "(default: fetch the registries)."),
    kind: str = typer.Option(None, "--kind", help=f"One of {', '.join(KINDS)} (default: from the file suffix)."),
    out: Path = typer.Option(None, "--out", help="Directory to write NAME.toml into (default: the matrix read)."),
    name: str = typer.Option(None, "--name", help="Output file stem (default: the listing's stem)."),
    base_url: str = typer.Option("", "--base-url", callback=vocab.url_or_dir_option("--base-url"),
                                  help="Prefix for relative links and bare file names."),
    source: str = typer.Option("", "--source", help="Publisher to record for every wheel (overrides `# source:`)."),
    dry_run: bool = typer.Option(False, "--dry", help="Parse and count; write nothing."),
    allow_shrink: bool = typer.Option(False, "--allow-shrink", help="Let the file lose more than half its wheels."),
    index: str = typer.Option(registry.DEFAULT_INDEX, "--index", callback=vocab.url_option("--index"),
                               help="PyPI JSON API root (no --from)."),
    package: list[str] = typer.Option([], "--package", help="Only this registry package (repeatable; no --from)."),
    pre: bool = typer.Option(False, "--pre", help="Include pre-releases (no --from)."),
    pytorch_index: str = typer.Option(outside.PYTORCH_INDEX, "--pytorch-index",
                                      callback=vocab.url_option("--pytorch-index"),
                                      help="Root of PyTorch's per-CUDA index, or a mirror of it (no --from)."),
    github_api: str = typer.Option(outside.GITHUB_API, "--github-api", callback=vocab.url_option("--github-api"),
                                   help="GitHub REST API root for the release assets (no --from; GITHUB_TOKEN from "
                                        "the environment is sent when set)."),
    pypi_only: bool = typer.Option(False, "--pypi-only", help="Read only the PyPI feeds (no --from)."),
    timeout: float = typer.Option(15.0, "--timeout", help="Seconds per request before a source counts as down."),
    as_json: bool = typer.Option(False, "--json", help="Print what each source gave and what was written as JSON."),
) -> None:
    """Update the matrix from the registries (no --from), or regenerate one *.toml from an upstream listing.

    With no --from: the PyPI JSON API for torch, torchvision, torchaudio, triton, exllamav3, flash-attn,
    causal-conv1d, flash-linear-attention and fla-core, then download.pytorch.org's cu126/cu128/cu130 torch pages
    and the GitHub releases of exllamav3, flash-attention, causal-conv1d and mjun0812's flash-attention rebuilds,
    each conditionally (an unchanged answer rewrites nothing); a source that cannot be reached is named and its
    last data kept. Exit 1 when no source answered.

    With --from: refuses a listing of another family than the file's (flash-attn wheels into torch.toml) and one
    that would drop more than half the file's wheels; the replaced file is kept as NAME.toml.prev.

    Examples: labwright matrix refresh
              labwright matrix refresh --kind flash-attn-prebuilt \
                  --from wheels_matrix/sources/flash_attn_prebuilt.md
    """
    if not math.isfinite(timeout) or not 0 < timeout <= 600:
        raise BadInput(f"--timeout {timeout:g}: give a number of seconds above 0, at most 600 (default 15)")
    target = out or matrix_dir()
    meta = target / "components.toml" if (target / "components.toml").is_file() else matrix_dir() / "components.toml"
    if listing is None:
        given = [flag for flag, value in (("--kind", kind), ("--name", name), ("--base-url", base_url),
                                          ("--source", source), ("--allow-shrink", allow_shrink)) if value]
        if given:
            raise BadInput(f"{', '.join(given)} without --from: those shape a listing refresh; pass --from LISTING "
                           "or drop them to refresh from the registries")
        _refresh_registries(target, read_components(meta), index, package, pre, timeout, dry_run, as_json,
                            pytorch_index, github_api, not pypi_only)
        return
    if (package or pre or index != registry.DEFAULT_INDEX or timeout != 15.0 or pypi_only
            or pytorch_index != outside.PYTORCH_INDEX or github_api != outside.GITHUB_API):
        raise BadInput("--index/--package/--pre/--timeout/--pytorch-index/--github-api/--pypi-only with --from: "
                       "those are for the registry refresh; drop --from or them")
    report = refresh_listing(listing, target, read_components(meta), kind=kind, name=name, base_url=base_url,
                             source=source, dry_run=dry_run, allow_shrink=allow_shrink)
    if as_json:
        typer.echo(json.dumps({"dry": dry_run, "path": str(report.path), "wheels": len(report.wheels),
                               "skipped": report.skipped, "warnings": report.warnings}, indent=2))
        return
    for warning in report.warnings:
        stdout.print(f"[yellow]![/] {warning}")
    verb = "would write" if dry_run else "wrote"
    stdout.print(f"{verb} {report.path}: {len(report.wheels)} wheels, {len(report.skipped)} skipped")
    for reason in report.skipped[:5]:
        stdout.print(f"  skipped {reason}")


def _refresh_registries(target: Path, components: dict, index: str, packages: list[str], pre: bool,
                        timeout: float, dry_run: bool, as_json: bool = False,
                        pytorch_index: str = outside.PYTORCH_INDEX, github_api: str = outside.GITHUB_API,
                        outside_sources: bool = True) -> None:
    report = registry.refresh_registry(target, components, index=index, packages=packages, pre=pre,
                                       timeout=timeout, dry_run=dry_run, pytorch_index=pytorch_index,
                                       github_api=github_api, outside_sources=outside_sources)
    state = registry.read_state(target)
    if as_json:
        typer.echo(json.dumps({"dry": dry_run, "index": index, "sources": [
            {"package": o.package, "status": o.status, "newest": o.newest or None, "wheels": len(o.wheels),
             "sdists_only": o.sdists_only, "lines": o.lines} for o in report.outcomes],
            "outside": [{"source": o.package, "url": o.url, "status": o.status, "newest": o.newest or None,
                         "wheels": len(o.wheels), "lines": o.lines} for o in report.outside],
            "written": [str(p) for p in report.written], "unreached": report.unreached}, indent=2))
        if len(report.failed) == len(report.all):
            raise OperationFailed(f"no registry answered ({index}): the matrix is unchanged; check the network or "
                                  "--index, or raise --timeout")
        return
    for outcome in report.outcomes:
        url = f"{index.rstrip('/')}/{outcome.package}/json"
        record = state["sources"].get(url, {})
        if outcome.status == "unreachable":
            since = record.get("changed")
            kept = f"kept its data from {since} ({registry.age(since)})" if since else "no earlier data to keep"
            typer.echo(f"✗ {outcome.package}: {url} unreachable ({outcome.lines[0]}): {kept}")
            continue
        what = f"{len(outcome.wheels)} linux wheels" if outcome.wheels else (
            "sdists only on PyPI (no wheels)" if outcome.sdists_only else "no wheels kept")
        typer.echo(f"{'=' if outcome.status == 'unchanged' else '✓'} {outcome.package}: {outcome.status}, newest "
                   f"{outcome.newest or '-'}, {what} ({url})")
        for line in outcome.lines:
            typer.echo(f"  {line}")
    for outcome in report.outside:
        record = state["sources"].get(outcome.url, {})
        if outcome.status == "unreachable":
            since = record.get("changed")
            kept = (f"kept its data from {since} ({registry.age(since)})" if since else
                    "no data from it yet (the curated listings under sources/ still answer)")
            typer.echo(f"✗ {outcome.package}: {outcome.url} unreachable ({outcome.lines[0]}): {kept}")
            continue
        typer.echo(f"{'=' if outcome.status == 'unchanged' else '✓'} {outcome.package}: {outcome.status}, newest "
                   f"{outcome.newest or '-'}, {len(outcome.wheels)} linux wheels ({outcome.url})")
        for line in outcome.lines:
            typer.echo(f"  {line}")
    for path in report.written:
        typer.echo(f"wrote {path}")
    if len(report.failed) == len(report.all):
        raise OperationFailed(f"no registry answered ({index}): the matrix is unchanged; check the network or "
                              "--index, or raise --timeout")


class WheelContradicts(OperationFailed):
    """A wheel's name, METADATA and .so files disagree on what it was built against: exit 1."""


@app.command()
def inspect(
    wheels: list[Path] = typer.Argument(..., help="Wheel files (.whl) to read."),
    as_json: bool = typer.Option(False, "--json", help="Print what each wheel was built against as JSON."),
) -> None:
    """Say what a wheel was built against, read from the wheel itself: its label, METADATA Requires-Dist pins on
    torch and CUDA, and the CUDA runtime / torch its .so files link. Exit 1 when those contradict each other.

    Example: labwright matrix inspect exllamav3-1.4.2+cu132.torch2.11.0-cp312-cp312-linux_x86_64.whl
    """
    from labwright.matrix.wheelinspect import inspect_wheel

    for path in wheels:
        if not path.is_file():
            given = "'' (empty)" if str(path) == "." else str(path)  # typer makes '' the Path '.'
            raise BadInput(f"WHEELS {given}: no such wheel file; give the path of a downloaded .whl")
    results = [inspect_wheel(path) for path in wheels]
    if as_json:
        typer.echo(json.dumps([r.__dict__ for r in results], indent=2))
    else:
        for r in results:
            built = ", ".join(x for x in (f"torch {r.torch_build or r.torch}" if r.torch else "",
                                           f"CUDA {r.cuda}" if r.cuda else "",
                                           f"cxx11abi {r.cxx11_abi}" if r.cxx11_abi else "") if x)
            typer.echo(f"{r.filename}: built against {built or 'nothing it says (pure Python?)'}"
                       f"{'; links torch' if r.links_torch else ''}")
            for line in r.evidence:
                typer.echo(f"  {line}")
            for line in r.contradictions:
                typer.echo(f"  ✗ {line}")
    bad = [r for r in results if r.contradictions]
    if bad:
        raise WheelContradicts(f"{bad[0].filename}: {bad[0].contradictions[0]}"
                               + (f" (+{len(bad) - 1} more wheel(s))" if len(bad) > 1 else ""))


def _resolution_tables(resolution: Resolution) -> None:
    rows = [[c.component, c.wheel.package, c.wheel.version, c.reason] for c in resolution.wheels]
    request = resolution.request
    title = f"torch {request.torch} CUDA {request.cuda or 'auto'} Python {request.python} ({request.engine})"
    stdout.print(table(title, ["component", "package", "version", "why"], rows))
    for chosen in resolution.wheels:
        stdout.print(f"  {chosen.wheel.package}: {chosen.wheel.url}", soft_wrap=True)
    if resolution.absent:
        absent = [[a.name, a.reason] for a in resolution.absent]
        stdout.print(table("deliberately absent", ["component", "why"], absent))
    for error in resolution.errors:
        stdout.print(f"[red]✗ refused:[/] {error}", soft_wrap=True)


def _finish(resolution: Resolution, as_json: bool) -> None:
    message = None
    if not resolution.ok:
        more = f" (+{len(resolution.errors) - 1} more)" if len(resolution.errors) > 1 else ""
        message = f"stack refused: {resolution.errors[0]}{more}"
    if as_json:
        document = resolution.to_json()
        if message is not None:  # the resolution is also the documented error object (docs/cli.md)
            document.update(error=message, exit_code=StackRefused.exit_code)
        typer.echo(json.dumps(document, indent=2))
    else:
        _resolution_tables(resolution)
    if message is not None:
        raise StackRefused(message)


def _compute_cap(text: str) -> str:
    from labwright.gpu.arch import architecture

    try:
        return architecture(text).capability
    except BadInput as exc:
        raise BadInput(f"--compute-cap: {exc}") from None


@app.command()
def resolve(
    torch: str = typer.Option(None, "--torch", help="torch version: 2.11.0, or 2.11 for its newest patch."),
    cuda: str = typer.Option(None, "--cuda", help="CUDA of the torch index: 13.0 (default: highest the driver runs)."),
    python: str = typer.Option(None, "--python", help="CPython version of the target venv [3.12]."),
    engine: str = typer.Option(None, "--engine", help="tabbyapi or exllamav3: which components are required "
                                                      "[tabbyapi]."),
    driver: str = typer.Option(None, "--driver", help="NVIDIA driver version on the host (nvidia-smi)."),
    platform: str = typer.Option(None, "--platform", help=f"One of {', '.join(inputs.PLATFORMS)} [linux_x86_64]."),
    pin: list[str] = typer.Option([], "--pin", help="Constrain a package: --pin exllamav3==0.0.37 (repeatable)."),
    stack: str = typer.Option(None, "--stack", help="Resolve a named stack from stacks.toml instead."),
    compute_cap: list[str] = typer.Option([], "--compute-cap", help="The GPU's compute capability as nvidia-smi "
                                          "--query-gpu=compute_cap prints it (8.6, 12.0): builds without kernels "
                                          "for it are refused (repeatable: one per GPU model)."),
    as_json: bool = typer.Option(False, "--json", help='Print {"ok", "wheels", "absent", "errors"} as JSON.'),
) -> None:
    """Pick the newest compatible wheel of each component, say why, and what is absent and why.

    Exit 0 when the stack resolves, 1 when it is refused, 2 for unparsable input.

    Example: labwright matrix resolve --torch 2.11.0 --cuda 13.0 --python 3.12 --driver 580.65 --compute-cap 12.0
    """
    caps = tuple(_compute_cap(cap) for cap in compute_cap)  # a bad one is refused before anything is read
    if stack:
        # A named stack fixes all of these; taking one silently over the other resolved something not asked for.
        given = [name for name, value in (("--torch", torch), ("--cuda", cuda), ("--python", python),
                                          ("--engine", engine), ("--platform", platform), ("--pin", pin)) if value]
        if given:
            raise BadInput(f"--stack {stack} with {', '.join(given)}: a named stack fixes those; give --stack alone "
                           "(and --driver), or the versions without --stack")
    matrix = load_matrix()
    if stack:
        request = request_for(get_stack(stack, matrix), driver=driver, compute_caps=caps)
    elif not torch:
        raise BadInput("--torch is missing: give a torch version like --torch 2.11.0 (or --stack NAME)")
    else:
        request = StackRequest(torch=torch, cuda=cuda, python=python or "3.12", engine=engine or "tabbyapi",
                               driver=driver, platform=platform or "linux_x86_64", pins=tuple(pin),
                               compute_caps=caps)
    _finish(resolve_stack(request, matrix), as_json)


@app.command()
def check(
    requirements: list[str] = typer.Argument(None, help="Pins: wheel URLs, file names, name==version+label."),
    torch: str = typer.Option(..., "--torch", help="The torch the pins must fit: 2.11.0 (or 2.11.0+cu130)."),
    requirement_files: list[Path] = typer.Option([], "-r", "--requirement", help="A requirements file (repeatable)."),
    cuda: str = typer.Option(None, "--cuda", help="CUDA of that torch (default: from its +cuXYZ or a torch pin)."),
    python: str = typer.Option(None, "--python", help="CPython of the venv; also selects lines by their markers."),
    platform: str = typer.Option("linux_x86_64", "--platform", help=f"One of {', '.join(inputs.PLATFORMS)}."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also print the pins that fit."),
    as_json: bool = typer.Option(False, "--json", help="Print every pin's verdict as JSON."),
) -> None:
    """Exit 0 when every pinned wheel was built for this torch major.minor / CUDA / Python; else one line per pin.

    Example: labwright matrix check --torch 2.11.0 -r requirements.txt
    """
    lines = [(f"argument {i}", text) for i, text in enumerate(requirements or [], 1)]
    for path in requirement_files:
        lines += read_requirement_lines(path)
    if not lines and requirement_files:
        files = ", ".join(str(p) for p in requirement_files)
        raise BadInput(f"-r {files}: no requirements in it, so nothing to check; give a requirements file with pins "
                       "(flash_attn==2.8.3+cu130torch2.11) or pass them as arguments")
    if not lines:
        raise BadInput("nothing to check: pass requirements (flash_attn==2.8.3+cu130torch2.11) or -r FILE")
    verdicts = check_requirements(lines, torch, load_matrix(), cuda=cuda, python=python, platform=platform)
    # a requirements file may hold unpinned lines (they are not wheels to check); an argument given alone is meant
    # as a pin, and a check that checked nothing is not a pass (sweep at 2b91fd1: `garbage` exited 0, silent)
    checked = {v.origin for v in verdicts}
    loose = next(((origin, text) for origin, text in lines if origin.startswith("argument ") and origin not in checked),
                 None)
    if loose is not None or not verdicts:
        origin, text = loose or lines[0]
        raise BadInput(f"{origin} {text!r} is not a pinned wheel, so nothing was checked; give "
                       "name==version+label (flash_attn==2.8.3+cu130torch2.11), a wheel file name or its URL")
    if as_json:
        typer.echo(json.dumps({"torch": torch, "pins": [{"origin": v.origin, "text": v.text, "name": v.name,
                                                         "version": v.version, "status": v.status,
                                                         "problems": v.problems, "hint": v.hint} for v in verdicts]},
                              indent=2))
    for verdict in ([] if as_json else verdicts):
        if verdict.status == BROKEN:
            typer.echo(verdict.line())
        elif verbose or verdict.status == UNKNOWN:
            typer.echo(("? " if verdict.status == UNKNOWN else "") + verdict.line())
    broken = [v for v in verdicts if v.status == BROKEN]
    if broken:
        raise PinsBroken(f"{len(broken)} of {len(verdicts)} pinned wheel(s) were not built for torch {torch}")


@app.command()
def show(
    component: str = typer.Option(None, "--component", help="List this component's wheels (e.g. flash_attn)."),
    stack: str = typer.Option(None, "--stack", help="Show a named stack and what it resolves to."),
    torch: str = typer.Option(None, "--torch", help="Only wheels built for this torch major.minor (2.11)."),
    python: str = typer.Option(None, "--python", help="Only wheels installable on this Python (3.12)."),
    platform: str = typer.Option("linux_x86_64", "--platform", help="Only wheels for this platform ('all': any)."),
    limit: int = typer.Option(40, "--limit", help="Print at most this many wheels (newest first)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary, the wheels or the stack as JSON."),
) -> None:
    """Read-only view of the matrix: a summary, one component's wheels, or one stack.

    Example: labwright matrix show --component flash_attn --torch 2.11 --python 3.12
    """
    if limit < 1:
        raise BadInput(f"--limit {limit}: give a number of wheels >= 1 (the default is 40)")
    if stack and (component or torch or python):
        given = [name for name, value in (("--component", component), ("--torch", torch), ("--python", python))
                 if value]
        raise BadInput(f"--stack {stack} with {', '.join(given)}: show one stack, or one component's wheels, not both")
    filters = [name for name, value in (("--torch", torch), ("--python", python),
                                        ("--platform", None if platform == "linux_x86_64" else platform)) if value]
    if filters and not component and not stack:
        # the summary has nothing to filter: an option that would do nothing is refused, not ignored (sweep at
        # 2b91fd1: `matrix show --torch x` printed the summary and never read x)
        raise BadInput(f"{', '.join(filters)} filter one component's wheels: add --component NAME (e.g. flash_attn)")
    matrix = load_matrix()
    if stack:
        named = get_stack(stack, matrix)
        if not as_json:
            stdout.print(f"{named.name}: {named.description}\n  source: {named.source}\n  pins: "
                         f"{', '.join(named.pins)}")
        _finish(resolve_stack(request_for(named), matrix), as_json=as_json)
        return
    if component:
        if component not in matrix.components:
            raise BadInput(f"--component {component!r} is unknown: use one of {', '.join(matrix.components)}")
        wheels = matrix.wheels_of(component)
        if torch:
            mm = ".".join(inputs.parse_torch(torch).base_version.split(".")[:2])
            wheels = [w for w in wheels if w.torch in ("", mm) or (w.package == "torch" and w.version.startswith(mm))]
        if python:
            wheels = [w for w in wheels if python_matches(w.python, w.abi, inputs.parse_python(python))]
        if platform != "all":
            wheels = [w for w in wheels if platform_matches(w.platform, inputs.parse_platform(platform))]
        wheels = sorted(wheels, key=lambda w: (w.parsed_version, w.release), reverse=True)
        rows = [[w.package, w.version, w.python, w.platform, w.torch or "-", w.cuda or "-", w.cxx11_abi or "-",
                 f"{w.source} {w.release}".strip()] for w in wheels[:limit]]
        if as_json:
            keys = ["package", "version", "python", "platform", "torch", "cuda", "cxx11_abi", "source"]
            typer.echo(json.dumps({"component": component, "wheels": len(wheels),
                                   "shown": [dict(zip(keys, row, strict=True)) for row in rows]}, indent=2))
            return
        stdout.print(table(f"{component}: {len(wheels)} wheel(s), showing {len(rows)}",
                           ["package", "version", "python", "platform", "torch", "CUDA", "cxx11abi", "source"], rows))
        return
    rows = []
    ages = registry.data_ages(Path(matrix.root))
    for name in matrix.components:
        wheels = matrix.wheels_of(name)
        versions = sorted({w.public_version for w in wheels}, key=Version)
        torches = Counter(w.torch for w in wheels if w.torch)
        cudas = sorted({w.cuda for w in wheels if w.cuda})
        rows.append([name, str(len(wheels)), f"{versions[0]} .. {versions[-1]}" if versions else "-",
                     ", ".join(sorted(torches, key=lambda t: tuple(map(int, t.split("."))))) or "any",
                     ", ".join(cudas) or "-",
                     "; ".join(ages[p] for p in matrix.components[name].packages if p in ages)
                     or "listings only (never fetched)"])
    if as_json:
        keys = ["component", "wheels", "versions", "torch", "cuda", "data"]
        typer.echo(json.dumps({"root": str(matrix.root), "components": [dict(zip(keys, row, strict=True))
                                                                          for row in rows],
                               "stale": registry.stale_lines(Path(matrix.root))}, indent=2))
        return
    stdout.print(table(f"wheels matrix ({matrix.root})", ["component", "wheels", "versions", "torch", "CUDA", "data"],
                       rows))
    for line in registry.stale_lines(Path(matrix.root)):
        stdout.print(f"[yellow]![/] {line}", soft_wrap=True)


@app.command()
def stacks(
    as_json: bool = typer.Option(False, "--json", help="Print the stacks and their resolutions as JSON."),
) -> None:
    """List the named stacks, what each resolves to, and whether that agrees with the row it was recorded from.

    Example: labwright matrix stacks
    """
    matrix = load_matrix()
    rows, payload = [], {}
    for named in matrix.stacks.values():
        resolution = resolve_stack(request_for(named), matrix)
        checks = compare_with_seed(named, resolution)
        # "-": not part of this stack (tabbyAPI's extras install no flash-attn); "✗": wanted but absent
        cells = {c: ", ".join(short_label(x.wheel) for x in resolution.chosen(c))
                 or ("✗" if not named.only or c in named.only else "-")
                 for c in ("torch", "exllamav3", "flash_attn", "causal_conv1d", "fla")}
        verdict = ", ".join(f"{c.component} {c.status}" for c in checks if c.status != "agrees") or (
            "agrees with its row" if checks else "-")
        rows.append([named.name, *cells.values(), "ok" if resolution.ok else "refused", verdict])
        payload[named.name] = {"resolution": resolution.to_json(),
                               "seed": [c.__dict__ | {"disputes": [d.__dict__ for d in c.disputes]} for c in checks]}
    if as_json:
        typer.echo(json.dumps(payload, indent=2))
        return
    stdout.print(table("named stacks (wheels_matrix/stacks.toml)",
                       ["stack", "torch", "exllamav3", "flash-attn", "causal-conv1d", "FLA", "resolves",
                        "vs field note"], rows))
    for named in matrix.stacks.values():
        for dispute in named.disputed:
            line = f"[yellow]![/] {named.name} {dispute.component} {dispute.seed}: {dispute.reason}"
            stdout.print(line, soft_wrap=True)
