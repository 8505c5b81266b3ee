from django.contrib.admin import AdminSite
from django.http import HttpRequest


class QuantaAdminSite(AdminSite):
    site_header = "Quanta administration"
    site_title = "Quanta admin"

    def has_permission(self, request: HttpRequest) -> bool:
        user = request.user
        return bool(user.is_active and user.is_superuser)
