from django.urls import path

from scheduling import whatif_views

urlpatterns = [
    path("whatif/", whatif_views.page, name="whatif"),
    path("whatif/<int:pk>/", whatif_views.detail, name="whatif-run"),
]
