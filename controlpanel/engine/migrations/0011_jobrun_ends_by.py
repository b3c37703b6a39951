from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workloads", "0010_app_images"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobrun",
            name="ends_by",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
