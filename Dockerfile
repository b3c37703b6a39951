# The panel image: web, worker and beat (and the sync engine's init/finalize containers).
FROM node:20-bookworm-slim AS assets
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    AJUSTE_VAR_DIR=/var/lib/ajuste
WORKDIR /app
RUN groupadd --gid 10001 ajuste && useradd --uid 10001 --gid ajuste --home /app ajuste
COPY pyproject.toml README.md ./
COPY controlpanel ./controlpanel
COPY storage ./storage
COPY deploy ./deploy
COPY training/__init__.py training/protocol.py ./training/
RUN pip install --no-cache-dir .
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
