"""The site admins' audit log: the page and its CSV."""

from django.urls import path

from controlpanel.audit import views

urlpatterns = [
    path("audit/", views.audit_list, name="audit"),
    path("audit/csv/", views.audit_csv, name="audit-csv"),
]
