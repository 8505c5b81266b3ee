from django.urls import path

from workloads import dataset_views, serving_views, views

urlpatterns = [
    path("apps/", views.app_center, name="app-center"),
    path("apps/<slug:slug>/launch/", views.launch, name="launch"),
    path("workloads/", views.workload_list, name="workloads"),
    path("workloads/stop/", views.stop_selected, name="workloads-stop"),
    path("usage/", views.usage_page, name="usage"),
    path("desktop/", views.desktop, name="desktop"),
    path("workloads/new-job/", views.new_job, name="new-job"),
    path("workloads/<uuid:pk>/", views.workload_detail, name="workload"),
    path("workloads/<uuid:pk>/stop/", views.stop, name="workload-stop"),
    path("workloads/<uuid:pk>/extend/", views.extend, name="workload-extend"),
    path("workloads/<uuid:pk>/keep-gpu/", views.keep_gpu, name="workload-keep-gpu"),
    path("workloads/<uuid:pk>/run-again/", views.run_again, name="workload-run-again"),
    path("datasets/", dataset_views.dataset_list, name="datasets"),
    path("datasets/<slug:slug>/", dataset_views.dataset_detail, name="dataset"),
    path("datasets/<slug:slug>/delete/", dataset_views.dataset_delete, name="dataset-delete"),
    path("models/", serving_views.model_list, name="models"),
    path("models/<slug:slug>/", serving_views.model_detail, name="model"),
    path("endpoints/", serving_views.endpoint_list, name="endpoints"),
    path("endpoints/<slug:slug>/", serving_views.endpoint_detail, name="endpoint"),
    path("endpoints/<slug:slug>/stats/", serving_views.endpoint_stats, name="endpoint-stats"),
    path("endpoints/<slug:slug>/stop/", serving_views.endpoint_stop, name="endpoint-stop"),
]
