# The Rewind worker image used by docker-compose.yml.
#
#   docker build -t rewind-worker .
#   docker run --rm -e TEMPORAL_ADDRESS=... -e REWIND_STORE=s3://... rewind-worker
#
# It installs exactly what a worker needs (this project, no test or bench
# extras), runs as an unprivileged user, and reports its health with
# `rewind health` (exit 0 while the worker in the container polls Temporal).
FROM python:3.11.13-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore

# The unprivileged user the worker runs as (numeric ids, so that orchestrators
# can verify it is not root).
RUN groupadd --gid 10001 rewind \
 && useradd --uid 10001 --gid rewind --create-home --home-dir /home/rewind \
        --shell /usr/sbin/nologin rewind

# Build from a copy of the sources, then drop it: the installed package is all
# the worker runs. Everything pyproject.toml packages: the py-module worker.py,
# the packages workflows, activities (with its vendored tiktoken encodings),
# checkpoint_bridge, rewind and examples, and README.md (the project's readme).
WORKDIR /src
COPY pyproject.toml README.md worker.py ./
COPY workflows ./workflows
COPY activities ./activities
COPY checkpoint_bridge ./checkpoint_bridge
COPY rewind ./rewind
COPY examples ./examples
RUN pip install --no-cache-dir '.[postgres,redis]' \
 && cd / && rm -rf /src

# REWIND_HOME holds this container's own state (the worker's health file, the
# example's outbox); nothing in it is shared with other workers or clients.
WORKDIR /app
RUN mkdir -p /app/.rewind && chown -R rewind:rewind /app && chmod -R u=rwX,g=rX,o= /app
ENV REWIND_HOME=/app/.rewind

USER 10001:10001

HEALTHCHECK --interval=15s --timeout=10s --start-period=60s --retries=3 \
    CMD ["rewind", "health"]

CMD ["rewind", "worker"]
