"""`python -m server`: serve scalelab."""

from __future__ import annotations

import argparse
import logging
import sys

from pydantic import ValidationError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m server",
        description="Serve scalelab: the REST API (OpenAPI at /docs), the pages, and the monitor that follows "
        "the jobs. Settings come from SCALELAB_* environment variables: SCALELAB_DATABASE_URL, "
        "SCALELAB_RUNS_DIR, SCALELAB_SCHEDULER (auto, slurm, local), SCALELAB_WORKER_PYTHON, "
        "SCALELAB_PARTITION, SCALELAB_POLL_INTERVAL_S.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default: %(default)s)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    args = parser.parse_args(argv)

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import uvicorn

    from server.config import get_settings
    from server.main import SchedulerUnusable, create_app
    from server.profiles import ProfileError

    try:
        settings = get_settings()
        app = create_app(settings)
    except ValidationError as exc:
        logging.getLogger("server").error("invalid settings:\n%s", exc)
        return 2
    except (ProfileError, SchedulerUnusable) as exc:
        logging.getLogger("server").error("%s", exc)
        return 2
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
