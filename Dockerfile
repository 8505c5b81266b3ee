# Quanta: one image for the web process (daphne), the Celery worker and Celery beat.
# docker-compose.yml runs it three times with different commands; docs/operations.md.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app \
    DATA_DIR=/app/var

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
# owned by root; the app user can write only DATA_DIR.
RUN pip install --no-cache-dir . \
    && rm -rf build ./*.egg-info \
    && mkdir -p "$DATA_DIR" \
    && chown quanta:quanta "$DATA_DIR"

USER quanta

# Static files are collected into DATA_DIR/staticfiles at build and served by whitenoise
# (DEBUG off needs the manifest this writes). The SECRET_KEY here only lets settings load.
RUN SECRET_KEY=collectstatic-only-not-a-secret DEBUG=false \
    python manage.py collectstatic --noinput

EXPOSE 8000
CMD ["daphne", "-e", "tcp:port=8000:interface=0.0.0.0:backlog=1024", "--websocket-max-message-size", "67108864", "--websocket-max-frame-size", "67108864", "portal.asgi:application"]
