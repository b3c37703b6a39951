import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
django_application = get_wsgi_application()

from controlpanel.engine.checks import refuse_untrusted_local_backend  # noqa: E402
from controlpanel.usercontent.checks import refuse_shared_origin  # noqa: E402
from controlpanel.usercontent.tunnel import ContentTunnel  # noqa: E402

refuse_untrusted_local_backend()  # gunicorn runs no system checks
refuse_shared_origin()
# Websockets to a notebook's host under `make run` are tunnelled before Django (tunnel.py).
application = ContentTunnel(django_application)
