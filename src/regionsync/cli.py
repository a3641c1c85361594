"""Command line: ``regionsync serve``, ``regionsync demo``, and the management commands
over a node's HTTP API (``regionsync.manage``: status, tenants, endpoints, sources,
events, deliveries, recover, replay, token; see ``regionsync --help``)."""

from __future__ import annotations

import asyncio
import math
import os
import sys
from pathlib import Path

import click
import pydantic

from . import manage
from .config import describe_errors, load_settings
from .errors import CannotStart

__all__ = ["main"]


class CannotRun(click.ClickException):
    """One ``Error:`` line and exit 2: this install or these files cannot do what was asked
    (a missing extra, an unusable ``--payloads`` directory, a node that refuses to start)."""

    exit_code = 2


def _finite(param: click.Parameter, value: float) -> float:
    """``value`` unless it is NaN (which every range check lets through)."""
    if not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a number of seconds", param=param)
    return value


def run_async(coro: object) -> object:
    """Run a coroutine on uvloop when installed (2x the HTTP throughput here), else asyncio."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        return asyncio.run(coro)  # type: ignore[arg-type]
    return uvloop.run(coro)  # type: ignore[arg-type]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="regionsync", prog_name="regionsync")
@click.pass_context
def main(ctx: click.Context, url: str, token: str | None, as_json: bool) -> None:
    """regionsync: active-active, multi-region webhooks."""
    manage.init_context(ctx, url, token, as_json)


manage.register(main)


@main.command()
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="node.toml; every setting has a default, REGIONSYNC_<SETTING> overrides.",
)
def serve(config_path: str | None) -> None:
    """Run one node (HTTP API, gRPC replication, delivery workers)."""
    from .adapters.wiring import serve as serve_node

    try:
        settings = load_settings(config_path)
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    except pydantic.ValidationError as exc:
        where = Path(config_path).name if config_path else "configuration"
        lines = "\n".join(describe_errors(exc, where))
        raise click.ClickException(f"invalid configuration:\n{lines}") from None
    except ValueError as exc:  # tomllib.TOMLDecodeError: name the file, as above
        where = Path(config_path).name if config_path else "configuration"
        raise click.ClickException(f"invalid configuration: {where}: {exc}") from None
    if settings.tls is not None:
        for name in ("cert", "key", "ca"):
            path = getattr(settings.tls, name)
            if not path.is_file():
                raise click.ClickException(f"tls.{name}: file not found: {path}")
    if settings.tracing is not None:
        from .adapters.tracing import OtelMissing, require_otel

        try:
            require_otel()
        except OtelMissing as exc:
            raise CannotRun(str(exc)) from None
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise click.ClickException(f"data_dir: cannot create {settings.data_dir}: {exc}") from None
    try:
        run_async(serve_node(settings))
    except KeyboardInterrupt:
        pass
    except CannotStart as exc:  # e.g. a key ring that cannot open the region's secrets
        raise CannotRun(str(exc)) from None


@main.command()
@click.option(
    "--payloads",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Directory of real webhook payloads with a MANIFEST.json.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--events",
    type=click.IntRange(1, 100_000),
    default=300,
    show_default=True,
    help="Events to generate when no --payloads are given.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(0, 3600, min_open=True),
    callback=lambda _ctx, param, v: _finite(param, v),
    default=120.0,
    show_default=True,
    help="Seconds to wait for delivery and convergence.",
)
def demo(payloads: Path | None, as_json: bool, events: int, timeout: float) -> None:
    """Start three regions on loopback, publish, deliver, check convergence."""
    from .demo import PayloadsError, load_payloads, run_demo

    try:
        items = load_payloads(payloads, events)
    except PayloadsError as exc:
        raise CannotRun(f"--payloads: {exc}") from None
    ok = run_async(run_demo(payloads, as_json=as_json, timeout_s=timeout, items=items))
    sys.exit(0 if ok else 1)


@main.command()
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Directory for ca.pem, ca.key, <region>.pem, <region>.key.",
)
@click.option(
    "--region",
    "regions",
    multiple=True,
    required=True,
    help="A region to issue a certificate for (repeat).",
)
@click.option(
    "--name",
    "names",
    multiple=True,
    help="An extra DNS name or IP address for every certificate (repeat).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace an existing CA in --out (earlier certificates stop chaining to it).",
)
def certs(out: Path, regions: tuple[str, ...], names: tuple[str, ...], force: bool) -> None:
    """Make a private CA (or reuse the one in --out) and per-region certificates for
    mutual TLS (local use)."""
    from .certs import CertsError, make_certs

    try:
        written = make_certs(out, regions, names, force=force)
    except CertsError as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        where = exc.filename or out
        raise click.ClickException(f"--out: {where}: {exc.strerror or exc}") from None
    if "ca.pem" not in written:
        click.echo(f"signed with the existing CA {out / 'ca.pem'}", err=True)
    for path in written.values():
        click.echo(str(path))


@main.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def sim(args: tuple[str, ...]) -> None:
    """The simulation harness: ``sim run SCENARIO.toml [--seed N]``, ``sim explore
    --seeds A..B``. Runs ``python -m sim`` in a child process: the node package never
    imports the simulator (the layering contract in pyproject.toml)."""
    import subprocess

    env = {**os.environ, "REGIONSYNC_SIM_PROG": "regionsync sim"}  # its usage lines
    sys.exit(subprocess.call([sys.executable, "-m", "sim", *args], env=env))


if __name__ == "__main__":  # pragma: no cover
    main()
