# AuditEvent now belongs to core (core.0001_initial takes it over, same table): drop it from
# portal's state only. The table and its rows stay.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('portal', '0001_initial'),
        ('core', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.DeleteModel(name='AuditEvent'),
            ],
        ),
    ]
