from django.contrib.auth.models import AbstractUser


class User(AbstractUser):
    """A person who logs in; staff users are site admins."""
