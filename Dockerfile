# The panel image: web, worker and beat (and the sync engine's init/finalize containers).
FROM node:20-bookworm-slim AS assets
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund

FROM python:3.11-slim-bookworm
# The code runs from /app (no install step): PYTHONPATH makes its packages importable anywhere.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PYTHONPATH=/app \
    AJUSTE_VAR_DIR=/var/lib/ajuste
WORKDIR /app
RUN groupadd --gid 10001 ajuste && useradd --uid 10001 --gid ajuste --home /app ajuste
# The locked versions first (make lock), with hashes: this layer stays cached across code changes.
COPY requirements/panel.lock ./requirements/panel.lock
RUN pip install --no-cache-dir --require-hashes --no-deps -r requirements/panel.lock
COPY controlpanel ./controlpanel
COPY storage ./storage
COPY deploy ./deploy
# The panel imports the training package's option and protocol modules (not torch).
COPY training ./training
COPY manage.py Procfile ./
COPY templates ./templates
COPY static ./static
COPY --from=assets /src/node_modules/htmx.org/dist ./node_modules/htmx.org/dist
RUN DEBUG=0 SECRET_KEY=build-only STATIC_MANIFEST=1 python manage.py collectstatic --noinput -v 0 \
    && mkdir -p /var/lib/ajuste && chown ajuste:ajuste /var/lib/ajuste
USER 10001
EXPOSE 8000
CMD ["gunicorn", "controlpanel.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", \
     "--threads", "8", "--access-logfile", "-"]
