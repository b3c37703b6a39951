from django.http import HttpRequest


def shell(request: HttpRequest) -> dict:
    return {}
