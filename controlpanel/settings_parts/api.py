"""The REST API: Django REST framework, its throttles, and the OpenAPI schema's settings."""

from __future__ import annotations

from controlpanel.api.rates import env_rate
from controlpanel.env import env_str

__all__ = [
    "API_THROTTLE_TOKEN",
    "API_THROTTLE_USER",
    "REST_FRAMEWORK",
    "SPECTACULAR_SETTINGS",
]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "controlpanel.accounts.authentication.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "controlpanel.api.schema.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "controlpanel.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "controlpanel.api.errors.exception_handler",
    # API_THROTTLE_TOKEN / API_THROTTLE_USER below; a 429 with Retry-After past them.
    "DEFAULT_THROTTLE_CLASSES": ["controlpanel.api.throttling.ApiRateThrottle"],
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
# API requests per API token and per user (all their tokens and their session together), in
# windows shared by every web process through the cache: "1200/min", "20/s", "5000/hour",
# "100/10s", or "off".
API_THROTTLE_TOKEN = env_rate("API_THROTTLE_TOKEN", env_str("API_THROTTLE_TOKEN"), "1200/min")
API_THROTTLE_USER = env_rate("API_THROTTLE_USER", env_str("API_THROTTLE_USER"), "2400/min")
SPECTACULAR_SETTINGS = {
    "TITLE": "Ajuste API",
    "DESCRIPTION": (
        "GPU notebooks, training jobs and object storage on your own Kubernetes cluster."
    ),
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "controlpanel.jobs.states.JobState",
        "NotebookStateEnum": "controlpanel.notebooks.states.NotebookState",
        "AppStateEnum": "controlpanel.served.states.AppState",
    },
    # The live log streams, served before Django, described beside the logs.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "controlpanel.streams.schema.describe_streams",
    ],
}
