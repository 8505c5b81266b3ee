"""Pages for teachers and TAs, mounted under /teaching/ (see portal/urls.py)."""

from django.urls import path

from workloads import teaching

urlpatterns = [
    path("", teaching.classes, name="teaching"),
    path("grants/<int:pk>/edit/", teaching.grant_edit, name="teaching-grant-edit"),
    path("grants/<int:pk>/delete/", teaching.grant_delete, name="teaching-grant-delete"),
    path("<slug:slug>/", teaching.dashboard, name="teaching-class"),
    path("<slug:slug>/grants/new/", teaching.grant_new, name="teaching-grant-new"),
    path("<slug:slug>/sessions/<uuid:pk>/stop/", teaching.stop_session, name="teaching-stop"),
    path("<slug:slug>/members/add/", teaching.add_member, name="teaching-member-add"),
    path(
        "<slug:slug>/members/<int:pk>/remove/",
        teaching.remove_member,
        name="teaching-member-remove",
    ),
]
