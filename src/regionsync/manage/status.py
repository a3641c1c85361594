"""``regionsync status``: one row per region, each peer asked at its own HTTP API.

``status_rows``: the node asked (``cluster``, its ``/v1/cluster`` body) first, then its
peers, then any region in ``others`` that is not one of its peers (asked with
``--peer-url``). ``connected``, ``records_behind`` and ``last_contact`` are the asked
node's links; ``others`` maps a region (or, for a ``--peer-url`` that could not be asked,
the URL) to its own ``/v1/cluster`` body, or to why it could not be asked (a string): a
reached region shows its own registry hash, whether it equals the asked node's
(``agrees``) and how many of its own links are up (``peers_up``); an unreached peer shows
the asked node's state-digest verdict. ``refused``: on the asked node's row, the records
it refused per origin; on a peer's, those the peer refused of what the asked node sent it.
``clock``: the asked node's own status and error against the cluster's reference, each
peer's clock offset to it. ``version``: each region's release (its last Hello).
"""

from __future__ import annotations

import click

from .client import ApiClient, ManageError, client_of, json_mode, out

__all__ = ["features_line", "status", "status_rows"]


def status_rows(cluster: dict, others: dict[str, dict | str] | None = None) -> list[dict]:
    """One row per region (the module docstring says what each column is)."""
    others = others or {}
    custody = cluster.get("custody", {})
    records = custody.get("records", {})
    suspected = set(custody.get("suspected", []))
    mine = cluster["registry_hash"]

    def custody_of(region: str) -> str:
        rec = records.get(region)
        state = "own" if rec is None or rec["state"] == "own" else (
            "adopted by " + ",".join(rec["live"])
        )  # fmt: skip
        return state + (" (suspected)" if region in suspected else "")

    def peers_up(c: dict) -> str:
        peers = c.get("peers", [])
        return f"{sum(1 for p in peers if p['connected'])}/{len(peers)}"

    def reached(row: dict, other: dict) -> None:
        # registry_digest (issue 42: exact, O(1)) when both regions give it, else the hash
        if other.get("registry_digest") and cluster.get("registry_digest"):
            same = other["registry_digest"] == cluster["registry_digest"]
        else:
            same = other["registry_hash"] == mine
        row.update(reached="yes", registry=other["registry_hash"][:12],
                   agrees="yes" if same else "DIFFERS", peers_up=peers_up(other))  # fmt: skip

    clock = cluster.get("clock", {})  # absent before this release
    offsets = clock.get("offsets_ms", {})

    def clock_of(region: str) -> str:
        if region == cluster["region"]:
            if not clock:
                return "-"
            status = clock["status"]
            return status if status == "ok" else f"{status.upper()}:{clock['error_ms']:+d}ms"
        return f"{offsets[region]:+d}ms" if region in offsets else "-"

    rows = [{
        "region": cluster["region"], "version": (cluster.get("capabilities") or {}).get(
            "release", "?"), "reached": "self", "connected": "self",
        "clock": clock_of(cluster["region"]),
        "records_behind": 0, "last_contact": "-", "registry": mine[:12], "agrees": "-",
        "peers_up": peers_up(cluster), "custody": custody_of(cluster["region"]),
        "refused": _refused(cluster.get("refused")),
    }]  # fmt: skip
    peer_regions = {cluster["region"]}
    for p in cluster.get("peers", []):
        peer_regions.add(p["region"])
        since = p.get("seconds_since_contact")
        row = {
            "region": p["region"], "version": _version(p),
            "connected": "yes" if p["connected"] else "NO",
            "records_behind": p["records_behind"],
            "last_contact": "never" if since is None else f"{since:.1f}s ago",
            "custody": custody_of(p["region"]), "refused": _refused(p.get("refused")),
            "clock": clock_of(p["region"]),
        }  # fmt: skip
        other = others.get(p["region"], "no http_url")
        if isinstance(other, dict):
            reached(row, other)
        else:
            row.update(reached=_unreached(other), registry="-", agrees=_last_digest(p),
                       peers_up="-")  # fmt: skip
        rows.append(row)
    for key, other in others.items():
        if key in peer_regions:
            continue
        row = {"region": key, "connected": "not a peer", "records_behind": "-",
               "last_contact": "-", "custody": "-", "refused": "-",
               "clock": "-"}  # fmt: skip
        if isinstance(other, dict):
            row["region"] = other["region"]
            reached(row, other)
        else:
            row.update(reached=_unreached(other), registry="-", agrees="-", peers_up="-")
        rows.append(row)
    return rows


def _refused(by_origin: dict | None) -> str:
    """``none``, or per origin the records refused and the last one's seq and reason
    (cut to 40 characters)."""
    parts = []
    for origin, n in sorted((by_origin or {}).items()):
        why = n["last_reason"] if len(n["last_reason"]) <= 40 else n["last_reason"][:39] + "…"
        parts.append(f"{origin}: {n['count']} (#{n['last_seq']} {why})")
    return "; ".join(parts) or "none"


def _version(peer: dict) -> str:
    """A peer's release as its last Hello said: ``-`` if not heard since the asked node
    started, ``<0.2.0`` for a release that announces none (core.capabilities)."""
    v = peer.get("version")
    return "-" if v is None else (v or "<0.2.0")


def features_line(cluster: dict) -> str:
    """The cluster's effective feature set, as the asked node decides it, and the
    regions that hold it below what that node reads."""
    caps = cluster.get("capabilities") or {}
    eff = ", ".join(caps.get("effective", [])) or "baseline"
    line = f"features in use: {eff}"
    held = caps.get("held_back_by") or []
    if held:
        missing = sorted(set(caps.get("features", [])) - set(caps.get("effective", [])))
        line += f"; held back by {', '.join(held)} (lacking {', '.join(missing)})"
    return line


def _unreached(error: str) -> str:
    """The REACHED cell of a region that could not be asked: its error, cut to 40
    characters (the command's error line on stderr has it whole)."""
    return f"no: {error if len(error) <= 40 else error[:39] + '…'}"


def _last_digest(peer: dict) -> str:
    """The asked node's last state-digest verdict on an unreached peer, with its time:
    it is a past verdict (digests are compared only at equal version vectors)."""
    verdict = peer.get("state_agrees")
    if verdict is None:
        return "not compared"
    at = peer.get("last_digest_at") or ""
    when = f" at {at[11:19]}Z" if len(at) >= 19 else ""
    return f"{'agreed' if verdict else 'DIFFERED'} (digest{when})"


def cluster_of(client: ApiClient) -> dict:
    """A node's ``/v1/cluster``; ManageError (exit 2) for an answer no node gives."""
    body = client.call("GET", "/v1/cluster")
    if not (isinstance(body, dict) and isinstance(body.get("region"), str)):
        raise client.not_a_node("a cluster view without a region")
    return body


def peer_clusters(client: ApiClient, cluster: dict, extra_urls: tuple[str, ...]) -> dict:
    """Every peer's own ``/v1/cluster`` (region -> body), or why it could not be had
    (region -> message): asked at its ``http_url`` from the cluster view, or at one of
    ``extra_urls`` (matched to regions by their answer; one that cannot be asked is
    keyed by its URL)."""
    out_: dict[str, dict | str] = {}
    urls = [p["http_url"] for p in cluster.get("peers", []) if p.get("http_url")]
    for url in [*urls, *extra_urls]:
        try:
            peer = ApiClient(url, client.token)
        except ManageError as exc:
            out_[url] = exc.message
            continue
        try:
            body = cluster_of(peer)
            out_[body["region"]] = body
        except ManageError as exc:
            region = next((p["region"] for p in cluster.get("peers", [])
                           if p.get("http_url") == url), None)  # fmt: skip
            out_[url if region is None else region] = exc.message.split(";")[0]
        finally:
            peer.close()
    return out_


@click.command()
@click.option(
    "--peer-url",
    "peer_urls",
    multiple=True,
    metavar="URL",
    help="Also ask this node (repeat; for peers configured without http_url).",
)
@click.pass_context
def status(ctx: click.Context, peer_urls: tuple[str, ...]) -> None:
    """Every region: the asked node's links to it (connected, records behind, last
    contact), its own registry hash and whether it agrees, its links up, custody, the
    records refused (by the asked node; by each peer of what it sent). Peers
    are asked at the ``http_url`` of their ``[[peers]]`` entry (or ``--peer-url``) with
    the same token; a peer that cannot be asked shows the asked node's last state-digest
    verdict on it, with its time (``agreed``/``DIFFERED (digest at 12:14:04Z)``). Exits 3
    after printing when a region asked over HTTP (an ``http_url`` or a ``--peer-url``)
    could not be asked (its row says why)."""
    client = client_of(ctx)
    cluster = cluster_of(client)
    others = peer_clusters(client, cluster, peer_urls)
    if json_mode(ctx):
        out(ctx, {**cluster, "regions": {cluster["region"]: cluster, **others}})
    else:
        cols = ["region", "version", "reached", "connected", "records_behind", "last_contact",
                "registry", "agrees", "peers_up", "custody", "refused", "clock"]  # fmt: skip
        out(ctx, status_rows(cluster, others), cols)
        click.echo(features_line(cluster))
    failed = sorted(k for k, v in others.items() if not isinstance(v, dict))
    if failed:
        why = "; ".join(f"{k}: {others[k]}" for k in failed)
        raise ManageError(f"could not ask {why}", exit_code=3)
