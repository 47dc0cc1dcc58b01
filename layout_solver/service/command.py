"""`layout-solver serve`: the command line's settings checked and the service started (the CLI's subcommand; the
service's own modules need the `service` extra, imported only when it runs)."""

from __future__ import annotations

import argparse
import sys

from pydantic import ValidationError

from layout_solver.core.problem import ProblemError


def cmd_serve(args: argparse.Namespace) -> int:
    """`layout-solver serve`: run the solver as an HTTP service."""
    import os

    try:
        from layout_solver.lowering.client import TOKEN_ENV
        from layout_solver.service.app import ServiceSettings, serve
    except ImportError as exc:
        raise ProblemError(f"the service needs its extra: pip install 'layout-solver[service]' ({exc})") from exc
    token = args.token or os.environ.get(TOKEN_ENV) or None
    fields = {
        "host": args.host,
        "port": args.port,
        "workers": args.workers,
        "cache_dir": args.cache,
        "cache_bytes": int(args.cache_size_mb * (1 << 20)),
        "max_body_bytes": int(args.max_body_mb * (1 << 20)),
        "token": token,
    }
    try:
        settings = ServiceSettings.model_validate({k: v for k, v in fields.items() if v is not None})
        settings.resolved_cache_dir().mkdir(parents=True, exist_ok=True)
    except ValidationError as exc:
        raise ProblemError("; ".join(f"--{e['loc'][0]}: {e['msg']}".replace("_", "-") for e in exc.errors())) from exc
    except OSError as exc:
        raise ProblemError(f"cannot use cache directory {settings.resolved_cache_dir()}: {exc.strerror}") from exc
    if settings.host not in ("127.0.0.1", "localhost", "::1") and not token:
        print(
            f"layout-solver: serving on {settings.host} without a token: anyone who can reach it may use it",
            file=sys.stderr,
        )
    print(
        f"layout-solver service on http://{settings.host}:{settings.port} ({settings.workers} workers, cache "
        f"{settings.resolved_cache_dir()}); docs at /docs",
        file=sys.stderr,
        flush=True,
    )
    serve(settings, log_level=args.log_level)
    return 0
