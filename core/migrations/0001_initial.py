# AuditEvent moves here from portal with its table (portal_auditevent) and its rows: this
# migration adds the model to core's state only. The table itself is made by
# portal.0001_initial (on a fresh install), hence the dependency; portal.0002 then takes the
# model out of portal's state, again without touching the table.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('portal', '0001_initial'),
        ('tenants', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name='AuditEvent',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('time', models.DateTimeField(auto_now_add=True, db_index=True)),
                        ('action', models.CharField(db_index=True, max_length=64)),
                        ('target_type', models.CharField(max_length=64)),
                        ('target_id', models.CharField(blank=True, max_length=64)),
                        ('target_repr', models.CharField(blank=True, max_length=255)),
                        ('data', models.JSONField(blank=True, default=dict)),
                        ('actor', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('tenant', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='tenants.tenant')),
                    ],
                    options={
                        'db_table': 'portal_auditevent',
                        'ordering': ['-time', '-id'],
                    },
                ),
            ],
        ),
    ]
