from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from console import home
from portal import health, metrics
from portal.api import AuditEventViewSet
from portal.notices_api import NoticeViewSet

api_router = DefaultRouter()
api_router.register("audit-events", AuditEventViewSet, basename="audit-event")
api_router.register("notices", NoticeViewSet, basename="notice")

api_v1 = [
    path("", include("tenants.api.urls")),
    path("", include("workloads.api.urls")),
    path("", include("scheduling.api.urls")),
    path("billing/", include("billing.api.urls")),
    path("", include((api_router.urls, "portal-api"))),
]

urlpatterns = [
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("api/v1/", include(api_v1)),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("admin/", admin.site.urls),
    path("oidc/", include("mozilla_django_oidc.urls")),
    path("i18n/", include("django.conf.urls.i18n")),
    path("teaching/", include("workloads.teaching_urls")),
    path("console/", include("console.urls")),
    path("billing/", include("billing.urls")),
    path("", home.home, name="home"),  # a dashboard for each role (console.home)
    path("", include("scheduling.whatif_urls")),
    path("", include("workloads.urls")),
    path("", include("tenants.urls")),
]

# Errors raised outside a view (a request too large, a URL that matches nothing) answer in the
# API's JSON format under /api/.
handler400 = "portal.errors.bad_request"
handler403 = "portal.errors.permission_denied"
handler404 = "portal.errors.page_not_found"
handler500 = "portal.errors.server_error"
