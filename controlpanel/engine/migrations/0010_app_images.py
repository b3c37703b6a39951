from django.db import migrations, models


def add_default_images(apps, schema_editor):  # type: ignore[no-untyped-def]
    from controlpanel.served.defaults import ensure_default_app_images

    ensure_default_app_images(apps.get_model("workloads", "AppImage"))


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0009_preemptible"),
    ]

    operations = [
        migrations.CreateModel(
            name="AppImage",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("image", models.CharField(max_length=300, unique=True)),
                ("label", models.CharField(max_length=100)),
                ("enabled", models.BooleanField(default=True)),
            ],
            options={
                "ordering": ["label", "image"],
            },
        ),
        migrations.RunPython(add_default_images, migrations.RunPython.noop),
    ]
