from rest_framework.routers import DefaultRouter

from scheduling.api import views

app_name = "scheduling-api"

router = DefaultRouter()
router.register("clusters", views.ClusterViewSet, basename="cluster")
router.register("nodes", views.NodeViewSet, basename="node")
router.register("gpus", views.GpuDeviceViewSet, basename="gpu")
router.register("queues", views.QueueViewSet, basename="queue")
router.register("priority-classes", views.PriorityClassViewSet, basename="priority-class")
router.register("whatif", views.WhatIfViewSet, basename="whatif")

urlpatterns = router.urls
