from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "controlpanel.accounts"
    label = "accounts"
