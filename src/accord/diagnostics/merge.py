"""Merging a job's flight-recorder dumps: where did the ranks diverge?

Owns: reading the ``rank<N>.json`` files of a job (``flight_recorder.FORMAT``), lining the
ranks' calls up by group and sequence number, and finding, per group, the first call on which
the ranks disagree: different operations or arguments (a mismatch), some ranks never started
it (they lag, or skipped it), or some never finished it (they are stuck in it); and the
point-to-point operations still open in the dumps, each with what its peer had open towards
it (a send and a receive that should meet, or nothing: the peer never posted its side).
``accord flight-recorder DIR`` prints that; ``analyse`` returns it as data for tests and tools
(the Chrome/Perfetto timeline is ``trace``'s). Must not know about live groups: it reads files
only.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from typing import Any

from .flight_recorder import FORMAT, write
from .progress import describe_p2p
from .trace import trace


def load(paths: list[str]) -> dict[int, dict[str, Any]]:
    """rank → dump, from files and directories (every ``rank*.json`` in a directory)."""
    files: list[str] = []
    for path in paths:
        if os.path.isdir(path):
            files.extend(sorted(glob.glob(os.path.join(path, "rank*.json"))))
        else:
            files.append(path)
    dumps: dict[int, dict[str, Any]] = {}
    for file in files:
        with open(file, encoding="utf-8") as f:
            data = json.load(f)
        if data.get("format") != FORMAT:
            raise ValueError(
                f"{file}: not an accord flight-recorder dump (format "
                f"{data.get('format')!r}, expected {FORMAT!r})"
            )
        dumps[int(data["rank"])] = data
    return dumps


def _signature(entry: dict[str, Any]) -> tuple[Any, ...]:
    return (entry["op"], entry.get("dtype"), entry.get("count"), entry.get("root"))


def _call(entry: dict[str, Any]) -> str:
    count = entry.get("count")
    parts = [p for p in (entry.get("dtype"), f"{count} elements" if count is not None else "") if p]
    if entry.get("root", -1) not in (-1, None):
        parts.append(f"root {entry['root']}")
    return f"{entry['op']} #{entry['seq']}" + (f" ({', '.join(parts)})" if parts else "")


def analyse(dumps: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per group: its members, which dumps are missing, each rank's last call, and the first
    divergence (None when every rank that dumped agrees on every call)."""
    groups: dict[int, dict[str, Any]] = {}
    for rank, dump in dumps.items():
        for g in dump["groups"]:
            info = groups.setdefault(
                g["id"], {"id": g["id"], "name": g["name"], "ranks": g["ranks"], "calls": {}, "p2p": {}}
            )
            info["calls"][rank] = {e["seq"]: e for e in g["entries"]}
            info["p2p"][rank] = g.get("p2p", [])
    results = []
    for gid in sorted(groups):
        info = groups[gid]
        calls: dict[int, dict[int, dict[str, Any]]] = info["calls"]
        missing = [r for r in info["ranks"] if r not in calls]
        last = {r: (max(c.values(), key=lambda e: e["seq"]) if c else None) for r, c in calls.items()}
        results.append(
            {
                "id": gid,
                "name": info["name"],
                "ranks": info["ranks"],
                "missing_dumps": missing,
                "last": last,
                "divergence": _first_divergence(calls),
                "last_p2p": {r: ops[-1] if ops else None for r, ops in info["p2p"].items()},
                "open_p2p": _open_p2p(info["p2p"]),
            }
        )
    return results


_SENDS, _RECVS = ("send", "isend"), ("recv", "irecv")


def _open_p2p(p2p: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The p2p operations not ended in the dumps, each with ``counterpart``: the peer's open
    operations towards this rank with the same tag (None: the peer did not dump)."""
    found = []
    for rank in sorted(p2p):
        for item in p2p[rank]:
            if item["state"] != "started":
                continue
            peer = item.get("peer")
            counterpart: list[dict[str, Any]] | None = None
            if peer is not None and peer in p2p:
                wanted = _RECVS if item["op"] in _SENDS else _SENDS
                counterpart = [
                    o
                    for o in p2p[peer]
                    if o["state"] == "started"
                    and o["op"] in wanted
                    and o.get("peer") in (rank, None)
                    and o["tag"] == item["tag"]
                ]
            found.append({"rank": rank, "op": item, "counterpart": counterpart})
    return found


def _first_divergence(calls: dict[int, dict[int, dict[str, Any]]]) -> dict[str, Any] | None:
    if not calls:
        return None
    # only the window every rank still holds can be compared (rings forget old calls)
    oldest = max((min(c) if c else 0) for c in calls.values())
    newest = max((max(c) if c else 0) for c in calls.values())
    for seq in range(max(oldest, 1), newest + 1):
        present = {r: c[seq] for r, c in calls.items() if seq in c}
        absent = sorted(r for r in calls if seq not in calls[r])
        signatures = {_signature(e) for e in present.values()}
        unfinished = sorted(r for r, e in present.items() if e["state"] != "completed")
        if len(signatures) > 1:
            return {"seq": seq, "kind": "mismatch", "calls": present, "absent": absent}
        if absent:
            return {"seq": seq, "kind": "not reached", "calls": present, "absent": absent}
        if unfinished:
            return {
                "seq": seq,
                "kind": "not finished",
                "calls": present,
                "absent": absent,
                "unfinished": unfinished,
            }
    return None


def render(dumps: dict[int, dict[str, Any]]) -> str:
    """The human-readable report of ``accord flight-recorder``."""
    if not dumps:
        return "no flight-recorder dumps found"
    lines = [f"{len(dumps)} dumps: ranks {', '.join(map(str, sorted(dumps)))}"]
    for rank in sorted(dumps):
        lines.append(
            f"  rank {rank} (pid {dumps[rank].get('pid')} on {dumps[rank].get('host')}): "
            f"{dumps[rank].get('reason')}".splitlines()[0]
        )
    changes = next((d["membership"] for d in dumps.values() if d.get("membership")), None)
    if changes:  # (ranks above are this world's: say how the job got here)
        lines.append(f"membership changes before this world ({len(changes)}):")
        for c in changes:
            did = f"ranks {c['excluded']} excluded" if "excluded" in c else f"{c.get('admitted')} admitted"
            lines.append(f"  #{c['change']} {c['what']}: {did}, world {c['size'][0]} -> {c['size'][1]}")
    for group in analyse(dumps):
        lines.append("")
        lines.append(f"group {group['name']!r} (id {group['id']}, ranks {group['ranks']})")
        if group["missing_dumps"]:
            lines.append(
                f"  no dump from rank {', '.join(map(str, group['missing_dumps']))} "
                f"(dead, or it never dumped)"
            )
        for rank, entry in sorted(group["last"].items()):
            last = f"{_call(entry)} {entry['state']}" if entry else "none"
            lines.append(f"  rank {rank}: last call {last}")
            p2p = group["last_p2p"].get(rank)
            if p2p is not None:
                why = f" ({p2p['error'].splitlines()[0][:200]})" if p2p.get("error") else ""
                lines.append(f"  rank {rank}: last p2p {describe_p2p(p2p)} {p2p['state']}{why}")
        lines.extend(_render_open_p2p(group["open_p2p"]))
        div = group["divergence"]
        if div is None:
            lines.append("  no divergence: every rank that dumped made the same calls")
            continue
        lines.append(f"  first divergence at #{div['seq']}: {div['kind']}")
        for rank, entry in sorted(div["calls"].items()):
            lines.append(
                f"    rank {rank}: {_call(entry)} {entry['state']}"
                + (f" ({entry['error']})" if entry.get("error") else "")
            )
        for rank in div["absent"]:
            last = group["last"].get(rank)
            lines.append(
                f"    rank {rank}: never started it (its last call: "
                f"{_call(last) + ' ' + last['state'] if last else 'none'})"
            )
    return "\n".join(lines)


def _render_open_p2p(open_ops: list[dict[str, Any]]) -> list[str]:
    lines = []
    for found in open_ops:
        item, counterpart = found["op"], found["counterpart"]
        if counterpart is None:
            verdict = (
                "any rank may answer it" if item.get("peer") is None else f"no dump from rank {item['peer']}"
            )
        elif counterpart:
            verdict = (
                f"rank {item['peer']} has {describe_p2p(counterpart[0])} open: they "
                f"should meet (different sizes or dtypes, or the transport is stuck)"
            )
        else:
            side = "receive" if item["op"] in _SENDS else "send"
            verdict = (
                f"rank {item['peer']} has no matching {side} open: it never posted one, "
                f"or is waiting elsewhere"
            )
        lines.append(f"  rank {found['rank']}: open p2p {describe_p2p(item)}: {verdict}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="accord flight-recorder",
        description="Merge the flight-recorder dumps of a job and show where the ranks diverge.",
    )
    parser.add_argument("paths", nargs="+", help="dump files (rank<N>.json) or directories of them")
    parser.add_argument("--json", action="store_true", help="print the analysis as JSON")
    parser.add_argument(
        "--trace",
        metavar="OUT.json",
        help="also write the job's calls as one Chrome/Perfetto timeline (a row "
        "per rank; open it in https://ui.perfetto.dev or chrome://tracing)",
    )
    args = parser.parse_args(argv)
    try:
        dumps = load(args.paths)
        if args.trace:
            timeline = trace(dumps)
            write(timeline, args.trace)
    except (OSError, ValueError) as exc:
        print(f"accord flight-recorder: {exc}", file=sys.stderr)
        return 2
    if args.trace:
        print(
            f"wrote {args.trace}: {len(dumps)} ranks, "
            f"{sum(e['ph'] == 'X' for e in timeline['traceEvents'])} calls (open it in "
            f"https://ui.perfetto.dev or chrome://tracing)",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(analyse(dumps), indent=1, default=str))
    else:
        print(render(dumps))
    return 0
