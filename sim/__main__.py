"""``python -m sim run [SCENARIO.toml] [--seed N]`` and ``python -m sim explore --seeds A..B``.

(``regionsync sim`` cannot host these: import-linter forbids ``regionsync`` importing
``sim``, even lazily inside a command function.)
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
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


def _explore_one(args: tuple[int, bool]) -> Result:
    seed, recreate = args
    res = run(Options.explore(seed, recreate=recreate))
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
    "--recreate/--no-recreate",
    default=True,
    show_default=True,
    help="Let regions re-create endpoint ids they used before (the workload that found "
    "sim/regressions/registry-recreate-endpoint-dot-reuse.toml).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Write reports of failing seeds here.",
)
@click.option("--verbose", "-v", is_flag=True, help="A line per seed, not only failures.")
def explore(
    seed_range: str, jobs: int | None, recreate: bool, out: Path | None, verbose: bool
) -> None:
    """Run many seeds, each with the fault mix its seed picks."""
    seeds = _seeds(seed_range)
    jobs = jobs or multiprocessing.cpu_count()
    click.echo(
        f"explore seeds {seeds.start}..{seeds.stop - 1} jobs {jobs} recreate {recreate}", err=True
    )
    started = time.perf_counter()
    failed: list[Result] = []
    cost = 0.0
    work = [(s, recreate) for s in seeds]
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
                    _write(res, out, None)
    if jobs != 1:
        pool.shutdown()
    wall = time.perf_counter() - started
    click.echo(
        f"{len(seeds)} seeds, {len(failed)} failed, {wall:.1f}s wall, "
        f"{cost / len(seeds):.2f}s per seed"
    )
    for res in failed:
        click.echo(f"  seed {res.options.seed}: {res.violations[0]}")
        click.echo(f"    reproduce: {repro_command(res, None)}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
