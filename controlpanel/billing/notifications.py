"""A budget alert, told: an e-mail to the project's managers and, if the project has one, its
webhook (`X-Ajuste-Event: budget.threshold`, signed like a job's end: the same path,
workloads/notifications.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.urls import reverse

from controlpanel.billing.models import BudgetAlert
from controlpanel.engine.webhooks import post_project_webhook
from controlpanel.projects.models import Membership, Role

EVENT = "budget.threshold"


def alert_payload(alert: BudgetAlert) -> dict[str, Any]:
    project = alert.project
    return {
        "event": EVENT,
        "project": project.slug,
        "month": f"{alert.month:%Y-%m}",
        "threshold": alert.threshold,
        "budget": f"{alert.budget:.2f}",
        "spent": f"{alert.spent:.2f}",
        "currency": alert.currency,
        "launches_held": alert.threshold >= 100,
        "running_work_stopped": alert.threshold >= 100 and project.budget_stops_running,
        "url": settings.SITE_URL + reverse("billing-usage", kwargs={"slug": project.slug}),
    }


def alert_subject(alert: BudgetAlert) -> str:
    return f"[Ajuste] {alert.project.name}: {alert.threshold} % of the {alert.month:%B} budget"


def alert_text(alert: BudgetAlert) -> str:
    payload = alert_payload(alert)
    lines = [
        f"Project {alert.project.name} has spent {payload['spent']} {alert.currency} of its "
        f"{payload['budget']} {alert.currency} budget for {alert.month:%B %Y} "
        f"({alert.threshold} % reached).",
    ]
    if payload["launches_held"]:
        lines.append(
            "New launches wait until the budget is raised or the month ends"
            + (", and running work is being stopped." if payload["running_work_stopped"] else ".")
        )
    lines.append(f"\n{payload['url']}")
    return "\n".join(lines) + "\n"


def manager_emails(alert: BudgetAlert) -> list[str]:
    managers = Membership.objects.filter(
        project=alert.project, role=Role.MANAGER, user__is_active=True
    ).exclude(user__email="")
    return sorted(set(managers.values_list("user__email", flat=True)))


def send_alert_email(alert: BudgetAlert) -> None:
    recipients = manager_emails(alert)
    if recipients:
        send_mail(
            subject=alert_subject(alert),
            message=alert_text(alert),
            from_email=None,
            recipient_list=recipients,
            fail_silently=False,
        )


def post_alert_webhook(alert: BudgetAlert) -> None:
    post_project_webhook(alert.project, EVENT, alert_payload(alert))
