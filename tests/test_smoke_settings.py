def test_settings_import():
    from django.conf import settings

    assert settings.DATABASES["default"]["ENGINE"].endswith("postgresql")
