"""``python -m sim run [SCENARIO.toml] [--seed N]``, ``python -m sim explore --seeds A..B`` and
``python -m sim hashes --seeds A..B [--write F | --check F]``.

(``regionsync sim`` cannot host these: import-linter forbids ``regionsync`` importing
``sim``, even lazily inside a command function.)
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from pathlib import Path

import click

from ._options import Options, load_scenario
from ._report import html_report, repro_command, text_report
from ._run import Result, run


def _seeds(text: str) -> range:
    a, sep, b = text.partition("..")
    try:
        lo, hi = int(a), int(b if sep else a)
    except ValueError:
        raise click.BadParameter("expected A..B, e.g. 1..500") from None
    if hi < lo:
        raise click.BadParameter("B must be >= A")
    return range(lo, hi + 1)


def _write(res: Result, out: Path, scenario: str | None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{res.options.scenario}-{res.options.seed}"
    (out / f"{stem}.txt").write_text(text_report(res, scenario))
    (out / f"{stem}.html").write_text(html_report(res, scenario))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Deterministic simulation of a regionsync cluster (one seed, one verdict)."""


@main.command("run")
@click.argument("scenario", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option("--seed", type=int, default=None, help="Seed (default: the scenario's).")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("sim-out"),
    show_default=True,
    help="Directory for the text and HTML reports.",
)
def run_cmd(scenario: str | None, seed: int | None, out: Path) -> None:
    """Run one scenario (or, without one, the seed's own fault mix)."""
    opts = load_scenario(scenario, seed) if scenario else Options.explore(seed or 1)
    click.echo(f"seed {opts.seed}\noptions: {opts.describe()}", err=True)
    res = run(opts)
    click.echo(text_report(res, scenario))
    _write(res, out, scenario)
    click.echo(f"reports in {out}/", err=True)
    if not res.ok:
        click.echo(f"FAILED; reproduce with: {repro_command(res, scenario)}", err=True)
        sys.exit(1)


def _explore_one(args: tuple[int, str | None]) -> Result:
    seed, scenario = args
    opts = load_scenario(scenario, seed) if scenario else Options.explore(seed)
    res = run(opts)
    res.timeline = []  # keep what crosses the process boundary small
    return res


@main.command()
@click.option("--seeds", "seed_range", required=True, help="A..B, inclusive.")
@click.option(
    "--jobs",
    type=click.IntRange(1, 64),
    default=None,
    help="Worker processes (default: CPU count).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write reports of failing seeds here.",
)
@click.option(
    "--scenario",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Sweep this scenario file's fault mix over the seeds.",
)
@click.option("--verbose", "-v", is_flag=True, help="A line per seed, not only failures.")
def explore(
    seed_range: str,
    jobs: int | None,
    scenario: str | None,
    out: Path | None,
    verbose: bool,
) -> None:
    """Run many seeds, each with the fault mix its seed picks (or SCENARIO's)."""
    seeds = _seeds(seed_range)
    jobs = jobs or multiprocessing.cpu_count()
    click.echo(
        f"explore seeds {seeds.start}..{seeds.stop - 1} jobs {jobs} "
        + (f"scenario {scenario}" if scenario else "fault mix per seed"),
        err=True,
    )
    started = time.perf_counter()
    failed: list[Result] = []
    cost = 0.0
    work = [(s, scenario) for s in seeds]
    if jobs == 1:
        results = map(_explore_one, work)
    else:
        ctx = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")
        pool = concurrent.futures.ProcessPoolExecutor(jobs, mp_context=ctx)
        results = pool.map(_explore_one, work, chunksize=4)
    with click.progressbar(
        results, length=len(seeds), label="seeds", file=sys.stderr, show_pos=True
    ) as bar:
        for res in bar:
            cost += res.wall_s
            o = res.options
            if verbose or not res.ok:
                mark = "ok  " if res.ok else "FAIL"
                click.echo(
                    f"\n{mark} seed {o.seed:5d} regions {o.regions} {res.wall_s:5.2f}s "
                    f"trace {res.trace_hash[:12]}"
                    + ("" if res.ok else f" {dict(Counter(v.kind for v in res.violations))}")
                )
            if not res.ok:
                failed.append(res)
                if out is not None:
                    _write(res, out, scenario)
    if jobs != 1:
        pool.shutdown()
    wall = time.perf_counter() - started
    click.echo(
        f"{len(seeds)} seeds, {len(failed)} failed, {wall:.1f}s wall, "
        f"{cost / len(seeds):.2f}s per seed"
    )
    for res in failed:
        click.echo(f"  seed {res.options.seed}: {res.violations[0]}")
        click.echo(f"    reproduce: {repro_command(res, scenario)}")
    sys.exit(1 if failed else 0)


SCENARIOS = Path(__file__).resolve().parent / "scenarios"


def _hash_one(args: tuple[str, int]) -> tuple[str, int, str, str]:
    """``(scenario, seed, trace hash, first violation or "")``."""
    path, seed = args
    res = run(load_scenario(path, seed))
    return Path(path).stem, seed, res.trace_hash, str(res.violations[0]) if res.violations else ""


def trace_hashes(
    seeds: range, jobs: int = 1, failed: list[str] | None = None
) -> dict[str, dict[str, str]]:
    """``{scenario: {seed: trace hash}}`` for every scenario in ``sim/scenarios``; the
    runs that failed a check are appended to ``failed`` (``scenario seed: violation``).

    Each run is independent (its own VirtualLoop); with ``jobs > 1`` they are spread over
    worker processes, which is itself a check that no process state leaks into a run.
    """
    work = [(str(p), s) for p in sorted(SCENARIOS.glob("*.toml")) for s in seeds]
    if jobs == 1:
        rows = list(map(_hash_one, work))
    else:
        ctx = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=ctx) as pool:
            rows = list(pool.map(_hash_one, work, chunksize=8))
    out: dict[str, dict[str, str]] = {}
    for name, seed, digest, violation in rows:
        out.setdefault(name, {})[str(seed)] = digest
        if violation and failed is not None:
            failed.append(f"{name} seed {seed}: {violation}")
    return out


@main.command()
@click.option("--seeds", "seed_range", required=True, help="A..B, inclusive.")
@click.option("--jobs", type=click.IntRange(1, 64), default=1, show_default=True)
@click.option("--write", "write_to", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--check", "check_against", type=click.Path(dir_okay=False, path_type=Path))
def hashes(seed_range: str, jobs: int, write_to: Path | None, check_against: Path | None) -> None:
    """Trace hashes of every scenario for SEEDS: print them as JSON, --write them to a
    file, or --check them against one (exit 1 listing every seed whose hash changed).
    Runs that fail a check are listed on stderr and make the exit status 1."""
    failed: list[str] = []
    got = trace_hashes(_seeds(seed_range), jobs, failed)
    for line in failed:
        click.echo(f"FAIL {line}", err=True)
    if write_to is not None:
        write_to.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    if check_against is None:
        if write_to is None:
            click.echo(json.dumps(got, indent=1, sort_keys=True))
        sys.exit(1 if failed else 0)
    want = json.loads(check_against.read_text())
    changed = [
        f"{name} seed {seed}: {digest[:12]} (fixture {want.get(name, {}).get(seed, '-')[:12]})"
        for name, by_seed in got.items()
        for seed, digest in by_seed.items()
        if want.get(name, {}).get(seed) != digest
    ]
    total = sum(map(len, got.values()))
    click.echo(f"{total} runs, {len(changed)} changed")
    for line in changed:
        click.echo("  " + line)
    sys.exit(1 if changed or failed else 0)


if __name__ == "__main__":
    # ``regionsync sim`` runs this module: usage lines name the command that was typed
    main(prog_name=os.environ.get("REGIONSYNC_SIM_PROG", "python -m sim"))
