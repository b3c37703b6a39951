from django.db import migrations

from controlpanel.flavors.defaults import ensure_default_flavors


def seed(apps, schema_editor):
    ensure_default_flavors(
        apps.get_model("flavors", "Flavor"), apps.get_model("flavors", "FlavorPrice")
    )


class Migration(migrations.Migration):
    dependencies = [("flavors", "0001_initial")]
    operations = [migrations.RunPython(seed, migrations.RunPython.noop)]
