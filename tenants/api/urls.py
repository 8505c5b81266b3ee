from django.urls import path
from rest_framework.routers import DefaultRouter

from tenants.api import views

app_name = "tenants-api"

router = DefaultRouter()
router.register("tenants", views.TenantViewSet, basename="tenant")
router.register("memberships", views.MembershipViewSet, basename="membership")
router.register("users", views.UserViewSet, basename="user")
router.register("tokens", views.ApiTokenViewSet, basename="token")
router.register("ssh-keys", views.SshKeyViewSet, basename="ssh-key")

urlpatterns = [
    path("roster-import/", views.RosterImportView.as_view(), name="roster-import"),
    *router.urls,
]
