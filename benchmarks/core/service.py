"""Load test of `layout-solver serve` on loopback, against the in-process solver on the same cores.

Run: .venv/bin/python -m benchmarks.core.service [--clients 8] [--requests 2000] [--distinct 300]
                                                  [--zoo resnet8,ds_cnn] [--out benchmarks/results/service.md]

1. Uncached: `--distinct` different zoo-sized problems (graph-shaped generators,
   30-450 ops), each sent once by `--clients` concurrent clients: solve
   throughput of the service versus a process pool of the same size solving
   the same JSON bodies in-process (parse, solve, serialize: what a user of
   the library does).
2. Cached: `--requests` requests drawn from those problems: p50/p99 latency,
   throughput, errors.
3. With `--zoo`: `layout-solver zoo` on those models and both targets, once in-process
   and once with `--service`; the result columns must be identical.

Targets (issue #15): zero errors; cached p99 <= 20 ms; uncached throughput
within 20% of in-process.
"""

from __future__ import annotations

import csv
import http.client
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import httpx
import psutil

from benchmarks import harness
from layout_solver.core.problem import parse_problem
from layout_solver.core.solve import solve
from layout_solver.core.synthetic import cnn_like, transformer_like

TIME_LIMIT = 10.0


def zoo_sized_problems(count: int, seed: int = 0) -> list[bytes]:
    """Distinct graph-shaped problems of zoo size (CNNs of 4-64 blocks, transformers of 2-30 blocks)."""
    rng = random.Random(seed)
    bodies = set()
    while len(bodies) < count:
        if rng.random() < 0.5:
            problem = cnn_like(
                rng.randint(4, 64),
                n_labels=rng.choice([2, 4, 6]),
                channels=rng.choice([8, 16, 32, 64, 96, 128]),
                hw=rng.choice([7, 14, 28, 56]),
            )
        else:
            problem = transformer_like(
                rng.randint(2, 30),
                n_labels=rng.choice([3, 4, 6]),
                tokens=rng.choice([49, 64, 196]),
                dim=rng.choice([64, 96, 128, 192, 256]),
            )
        bodies.add(problem.model_dump_json().encode())
    return sorted(bodies)


def _solve_body(body: bytes) -> float:
    """Parse, solve, serialize (what a user of the library does); the CPU seconds it took."""
    cpu = time.process_time()
    solve(parse_problem(body), time_limit=TIME_LIMIT).model_dump_json()
    return time.process_time() - cpu


def in_process(bodies: list[bytes], workers: int) -> tuple[float, float]:
    """Solves per second with `workers` processes, and CPU seconds per solve."""
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        list(pool.map(_solve_body, bodies[:workers]))  # start and warm the workers
        start = time.perf_counter()
        cpu = sum(pool.map(_solve_body, bodies, chunksize=1))
        return len(bodies) / (time.perf_counter() - start), cpu / len(bodies)


def _client(url: str, token: str, bodies: list[bytes]) -> tuple[list[float], list[str], float]:
    """One sequential client on one keep-alive connection (a process of its own: no GIL shared with the
    others): latencies, errors, and the CPU seconds the client itself used."""
    cpu = time.process_time()
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=120)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    latencies, errors = [], []
    for body in bodies:
        start = time.perf_counter()
        try:
            connection.request("POST", f"/v1/solve?time_limit={TIME_LIMIT}", body=body, headers=headers)
            response = connection.getresponse()
            payload = response.read()
            if response.status != 200:
                errors.append(f"HTTP {response.status}: {payload[:200]!r}")
        except (OSError, http.client.HTTPException) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
            connection.close()
            connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=120)
        latencies.append(time.perf_counter() - start)
    connection.close()
    return latencies, errors, time.process_time() - cpu


def load(url: str, bodies: list[bytes], clients: int, token: str, server_pid: int) -> dict:
    """Send every body once from `clients` client processes: latencies, errors, wall seconds, error
    samples, and the CPU seconds used meanwhile by the clients, the server process and its workers."""
    shares = [bodies[i::clients] for i in range(clients)]
    with ProcessPoolExecutor(clients, mp_context=get_context("spawn")) as pool:
        list(pool.map(_client, [url] * clients, [token] * clients, [[] for _ in shares]))  # start the clients
        before = service_cpu(server_pid)
        start = time.perf_counter()
        results = list(pool.map(_client, [url] * clients, [token] * clients, shares))
        wall = time.perf_counter() - start
        after = service_cpu(server_pid)
    errors = [e for _, errs, _ in results for e in errs]
    return {
        "latencies": [t for lat, _, _ in results for t in lat],
        "errors": len(errors),
        "wall": wall,
        "samples": errors[:5],
        "client_cpu": sum(c for _, _, c in results),
        "server_cpu": after["server"] - before["server"],
        "worker_cpu": after["workers"] - before["workers"],
    }


def service_cpu(server_pid: int) -> dict[str, float]:
    """CPU seconds so far of the server process and of its worker processes."""
    server = psutil.Process(server_pid)
    workers = 0.0
    for child in server.children(recursive=True):
        try:
            times = child.cpu_times()
            workers += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    times = server.cpu_times()
    return {"server": times.user + times.system, "workers": workers}


def start_server(workers: int, cache: Path, token: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cli = Path(sys.executable).with_name("layout-solver")
    proc = subprocess.Popen(
        [str(cli), "serve", "--port", str(port), "--workers", str(workers), "--cache", str(cache), "--token", token],
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit("the service did not start")


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 10) - 1] if len(values) > 1 else values[0]


def zoo_equivalence(models: str, url: str, token: str, out: Path) -> list[str]:
    """Rows that differ between an in-process zoo run and a --service one (empty: identical)."""
    cli = Path(sys.executable).with_name("layout-solver")
    env = {**os.environ, "LAYOUT_SOLVER_TOKEN": token}
    env.pop("LAYOUT_SOLVER_SERVICE", None)
    runs = {}
    for name, extra in (("in-process", []), ("service", ["--service", url])):
        target = out / name
        subprocess.run(
            [
                str(cli),
                "zoo",
                "--models",
                models,
                "--target",
                "ethos-u55-128,vulkan",
                "--jobs",
                "1",
                "--out",
                str(target),
                *extra,
            ],
            env=env,
            check=False,
            stdout=subprocess.DEVNULL,
        )
        with open(target / "results.csv") as f:
            runs[name] = {(r["model"], r["target"]): r for r in csv.DictReader(f)}
    # Columns that are the solver's answer and its effect on the program (not timings or notes).
    keys = [
        k
        for k in next(iter(runs["in-process"].values()))
        if any(
            w in k
            for w in (
                "transition",
                "transpose",
                "gap",
                "cycles",
                "equivalent",
                "status",
                "npu_ops",
                "cpu_ops",
                "problem_ops",
                "modelled",
            )
        )
    ]
    diffs = []
    for row_key, row in runs["in-process"].items():
        other = runs["service"].get(row_key, {})
        for k in keys:
            if row.get(k) != other.get(k):
                diffs.append(f"{row_key} {k}: in-process {row.get(k)!r} vs service {other.get(k)!r}")
    via = sorted({r.get("solved_by", "") for r in runs["service"].values()})
    return [
        (
            f"compared {len(runs['in-process'])} rows x {len(keys)} columns ({', '.join(keys)}); the service run "
            f"was solved by: {', '.join(via)}"
        ),
        *diffs,
    ]


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=2000, help="cached requests")
    parser.add_argument("--distinct", type=int, default=300, help="distinct (uncached) problems per round")
    parser.add_argument("--rounds", type=int, default=3, help="uncached rounds, in-process and service in turn")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--zoo", help="comma-separated zoo models to run with and without --service")
    args = parser.parse_args()
    everything = zoo_sized_problems(args.distinct * args.rounds)
    sets = [everything[r :: args.rounds] for r in range(args.rounds)]  # distinct problems per round: all uncached
    ops = sorted(len(parse_problem(b).ops) for b in everything)
    lines = [
        (
            f"# layout-solver service under load (loopback, {os.cpu_count()} cores, {args.workers} solver workers, "
            f"{args.clients} clients)"
        ),
        "",
        (
            f"Problems: {len(everything)} distinct graph-shaped problems, {ops[0]}-{ops[-1]} ops "
            f"(median {ops[len(ops) // 2]}), {statistics.mean(len(b) for b in everything) / 1024:.0f} KiB of JSON "
            f"on average, in {args.rounds} rounds of {args.distinct}."
        ),
        "",
        harness.provenance(tools=("ortools",)),
        "",
    ]
    print("\n".join(lines), flush=True)
    token = "bench"
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_server(args.workers, Path(tmp) / "cache", token)
        try:
            for bodies in sets:  # in-process and service on the same fresh problems, round after round
                baseline, baseline_cpu = in_process(bodies, args.workers)
                rounds.append((baseline, baseline_cpu, load(url, bodies, args.clients, token, proc.pid)))
            rng = random.Random(1)
            warm_run = load(url, [rng.choice(everything) for _ in range(args.requests)], args.clients, token, proc.pid)
            zoo = zoo_equivalence(args.zoo, url, token, Path(tmp)) if args.zoo else None
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)
    [t for _, _, run in rounds for t in run["latencies"]]
    cold_errors = sum(run["errors"] for _, _, run in rounds)
    cold_samples = [e for _, _, run in rounds for e in run["samples"]]
    warm, warm_errors, warm_wall, warm_samples = (warm_run[k] for k in ("latencies", "errors", "wall", "samples"))
    table = [
        (
            "| round | in-process solves/s | service solves/s | ratio | in-process CPU ms/solve | service CPU ms/solve "
            "(workers + server) | clients' CPU s | service p50 ms | p99 ms |"
        ),
        "|" + "---|" * 9,
    ]
    ratios = []
    for r, (baseline, baseline_cpu, run) in enumerate(rounds, 1):
        throughput = args.distinct / run["wall"]
        ratios.append(throughput / baseline)
        table.append(
            f"| {r} | {baseline:.1f} | {throughput:.1f} | {ratios[-1]:.0%} | {baseline_cpu * 1e3:.1f} | "
            f"{(run['worker_cpu'] + run['server_cpu']) / args.distinct * 1e3:.1f} | {run['client_cpu']:.1f} | "
            f"{percentile(run['latencies'], 50) * 1e3:.0f} | {percentile(run['latencies'], 99) * 1e3:.0f} |"
        )
    table += [
        "",
        "| cached | requests | errors | requests/s | p50 ms | p99 ms |",
        "|---|---|---|---|---|---|",
        (
            f"| all rounds' problems again | {len(warm)} | {warm_errors} | {len(warm) / warm_wall:.0f} | "
            f"{percentile(warm, 50) * 1e3:.2f} | {percentile(warm, 99) * 1e3:.2f} |"
        ),
    ]
    verdict = [
        "",
        (
            f"Uncached throughput, service / in-process on the same cores: median {statistics.median(ratios):.0%} over "
            f"{len(ratios)} rounds (target >= 80%); errors {cold_errors} uncached, {warm_errors} cached (target 0)."
        ),
        f"Cached p99 {percentile(warm, 99) * 1e3:.2f} ms (target <= 20 ms).",
        (
            "The service's CPU per solve includes the server process (HTTP, cache) and the workers' content hashing and "
            "disk cache; the clients share the cores only because the test is on loopback."
        ),
    ]
    for sample in cold_samples + warm_samples:
        verdict.append(f"error: {sample}")
    if zoo is not None:
        verdict += [
            "",
            f"Zoo with and without --service ({args.zoo}, ethos-u55-128 and vulkan): {zoo[0]}; "
            + ("identical." if len(zoo) == 1 else f"{len(zoo) - 1} differences:"),
            *zoo[1:],
        ]
    report = "\n".join(lines + table + verdict)
    print("\n".join(table + verdict))
    if args.out:
        Path(args.out).write_text(report + "\n")


if __name__ == "__main__":
    main()
