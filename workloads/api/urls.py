from rest_framework.routers import DefaultRouter

from workloads.api import datasets, serving, views

app_name = "workloads-api"

router = DefaultRouter()
router.register("images", views.ImageViewSet, basename="image")
router.register("flavors", views.FlavorViewSet, basename="flavor")
router.register("templates", views.AppTemplateViewSet, basename="template")
router.register("grants", views.GrantViewSet, basename="grant")
router.register("app-center", views.AppCenterViewSet, basename="app-center")
router.register("workloads", views.WorkloadViewSet, basename="workload")
router.register("datasets", datasets.DatasetViewSet, basename="dataset")
router.register("models", serving.ModelViewSet, basename="model")
router.register("endpoints", serving.EndpointViewSet, basename="endpoint")

urlpatterns = router.urls
