"""The ASGI entry point (uvicorn, the Procfile's `events`): the live streams
(controlpanel/streams/asgi.py) and, for anything else, Django's ASGI handler. The pages
themselves are served by gunicorn (wsgi.py), whose workers also carry make run's websocket
tunnel; the streams need an event loop, where one open stream costs no thread."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
django_application = get_asgi_application()

from controlpanel.engine.checks import refuse_untrusted_local_backend  # noqa: E402
from controlpanel.streams.asgi import StreamsApp  # noqa: E402

refuse_untrusted_local_backend()  # uvicorn runs no system checks
application = StreamsApp(django_application)
