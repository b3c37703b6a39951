# syntax=docker/dockerfile:1
# The panel image: web, worker, beat, watcher and migrations, and the volume sync engine that job
# pods run in their init, sidecar and finalize containers (AJUSTE_SYNC_IMAGE is this image).
#
#   make images                       (podman or docker; see docs/images.md)
#   docker build -t ghcr.io/ajuste/ajuste:$(python -c 'from deploy.version import VERSION; print(VERSION)') .
#
# PYTHON_IMAGE is a build argument so an image can be built from a base of one's own (CI makes
# one from Debian's packages with mmdebstrap: scripts/build-images); it must provide `python`
# and `pip` (3.11) on PATH, `useradd`, and CA certificates.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="ajuste" \
      org.opencontainers.image.description="Ajuste: self-hosted GPU control panel" \
      org.opencontainers.image.source="https://github.com/ajuste/ajuste" \
      org.opencontainers.image.licenses="Apache-2.0"
# The code runs from /app (no install step): PYTHONPATH makes its packages importable anywhere.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PYTHONPATH=/app \
    PIP_DISABLE_PIP_VERSION_CHECK=1 AJUSTE_VAR_DIR=/var/lib/ajuste
WORKDIR /app
RUN groupadd --gid 10001 ajuste && useradd --uid 10001 --gid ajuste --home /app ajuste
# Dependencies before the code, so this layer stays cached across code changes: the locked
# versions with their hashes (make lock), then the browser assets package-lock.json names
# (verified against its integrity hashes; no Node.js toolchain needed).
COPY requirements/panel.lock ./requirements/panel.lock
RUN pip install --require-hashes --no-deps -r requirements/panel.lock
COPY package.json package-lock.json ./
COPY scripts/fetch_assets.py ./scripts/
RUN python scripts/fetch_assets.py
COPY manage.py Procfile ./
COPY deploy ./deploy
COPY storage ./storage
# The panel imports the training package's option and protocol modules (not torch).
COPY training ./training
COPY templates ./templates
COPY static ./static
COPY controlpanel ./controlpanel
RUN DEBUG=0 SECRET_KEY=build-only STATIC_MANIFEST=1 python manage.py collectstatic --noinput -v 0 \
    && mkdir -p /var/lib/ajuste && chown ajuste:ajuste /var/lib/ajuste
USER 10001
EXPOSE 8000
CMD ["gunicorn", "controlpanel.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", \
     "--threads", "8", "--access-logfile", "-", "--keep-alive", "75"]
