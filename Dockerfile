# Quanta's images: two targets of one file (docker-compose.yml builds both).
#   web     (the default target) the web process (daphne), Celery beat, the migrations and the
#           SSH gateway: the portal's dependencies only, no notebook software.
#   worker  the Celery worker: the same plus the `local` extra (JupyterLab, matplotlib),
#           because the local backend starts notebooks where the worker runs. On Kubernetes
#           notebooks run in their own images, and the worker may run the web image.
# docs/operations.md.
FROM python:3.11-slim AS base

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app \
    DATA_DIR=/app/var \
    STATIC_ROOT=/app/staticfiles

# TIME_ZONE is validated with zoneinfo, which reads the system zone database; slim images
# do not all ship it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tzdata \
    && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10001 quanta \
    && useradd --system --uid 10001 --gid quanta --home-dir /app --no-create-home \
        --shell /usr/sbin/nologin quanta

WORKDIR /app
COPY . .

# `pip install .` brings the dependencies. The code itself runs from /app (PYTHONPATH above)
# because templates/ and static/ sit next to the packages, not inside them. The code stays
# owned by root; the app user can write only DATA_DIR (a volume in docker-compose.yml).
RUN mkdir -p "$DATA_DIR" && chown quanta:quanta "$DATA_DIR"


FROM base AS worker
RUN pip install --no-cache-dir ".[local]" && rm -rf build ./*.egg-info
USER quanta
CMD ["celery", "-A", "portal", "worker", "-Q", "default,cluster,watch", "-l", "info"]


FROM base AS web
# Static files are collected into STATIC_ROOT at build (outside DATA_DIR, so a volume there
# never hides a newer image's files) and served by whitenoise: DEBUG off needs the manifest
# this writes. The SECRET_KEY here only lets settings load.
RUN pip install --no-cache-dir . && rm -rf build ./*.egg-info \
    && SECRET_KEY=collectstatic-only-not-a-secret DEBUG=false \
        python manage.py collectstatic --noinput --verbosity 0
USER quanta
EXPOSE 8000
CMD ["daphne", "-e", "tcp:port=8000:interface=0.0.0.0:backlog=1024", "--websocket-max-message-size", "67108864", "--websocket-max-frame-size", "67108864", "portal.asgi:application"]
