from django.contrib.admin import AdminSite
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _


class QuantaAdminSite(AdminSite):
    site_header = _("Quanta administration")
    site_title = _("Quanta admin")

    def has_permission(self, request: HttpRequest) -> bool:
        user = request.user
        return bool(user.is_active and user.is_superuser)
