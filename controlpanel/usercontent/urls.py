"""The panel-side end of the ticket exchange (the content hosts' own paths are answered by
middleware.py before any URL is resolved)."""

from django.urls import path

from controlpanel.usercontent import views

urlpatterns = [
    path("usercontent/open/", views.content_open, name="usercontent-open"),
]
