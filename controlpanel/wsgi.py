import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlpanel.settings")
application = get_wsgi_application()

from controlpanel.engine.checks import refuse_untrusted_local_backend  # noqa: E402

refuse_untrusted_local_backend()  # gunicorn runs no system checks
