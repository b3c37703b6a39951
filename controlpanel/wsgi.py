import os

from django.core.wsgi import get_wsgi_application
from django.db import connections
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
django_application = get_wsgi_application()

from controlpanel.engine.checks import refuse_untrusted_local_backend  # noqa: E402
from controlpanel.usercontent.checks import refuse_shared_origin  # noqa: E402
from controlpanel.usercontent.tunnel import ContentTunnel  # noqa: E402

refuse_untrusted_local_backend()  # gunicorn runs no system checks
refuse_shared_origin()
# Websockets to a notebook's host under `make run` are tunnelled before Django (tunnel.py).
application = ContentTunnel(django_application)

# gunicorn --preload (the Procfile) imports this module once, in its master, and forks the
# workers from it: the URLconf (every view and what it imports) is loaded here too, so that no
# worker imports the panel again at its first request (#32: the second start's largest part),
# and the checks' database connection is closed so that no fork inherits its socket.
get_resolver().url_patterns  # noqa: B018 (imports the URLconf)
connections.close_all()
